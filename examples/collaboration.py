"""A coordinator directs two workers.

Run: ``python examples/collaboration.py``.  With ``ANTHROPIC_API_KEY`` set the
coordinator and the workers are Claude models; otherwise the coordinator is
driven by the scripted model (its decisions are JSON, a function of the turn
it is shown) and the workers are scripted too.  Either way every step is in the journal:
``loopruntime replay SESSION --journal examples.db`` shows it.
"""

from __future__ import annotations

import msgspec
import trio

from journal import open_journal
from journal.content import Text
from loopruntime import LoopDefinition, ModelRequest
from loopruntime.models import Reply, ScriptedModel
from loopruntime.models.anthropic import AnthropicModel
from session import Session
from session.embedded.collaboration import Collaboration, Decision, TaskSpec, Turn, Worker


def decide(request: ModelRequest) -> Reply:
    """The scripted coordinator: a decision as a function of the turn it is shown
    (the JSON after "This turn:" in its last message)."""
    asked = request.messages[-1].blocks[-1]
    assert isinstance(asked, Text)
    turn = msgspec.json.decode(asked.text.split("This turn:\n", 1)[1], type=Turn)
    if not turn.tasks:
        # Start both and wait for them in one decision.
        decision = Decision(
            mode="wait",
            state="asked both workers",
            tasks=(
                TaskSpec(key="pros", worker="optimist", input="List the pros of trio."),
                TaskSpec(key="cons", worker="sceptic", input="List the cons of trio."),
            ),
        )
    elif any(t.status == "running" for t in turn.tasks):
        decision = Decision(mode="wait", state=turn.state)
    else:
        said = "; ".join(f"{t.worker}: {t.output}" for t in turn.tasks)
        decision = Decision(mode="complete", output=f"Asked an optimist and a sceptic. {said}")
    return Reply(text=msgspec.json.encode(decision).decode())


def scripted() -> Collaboration:
    return Collaboration(
        coordinator=LoopDefinition(name="coordinator", model=ScriptedModel(decide)),
        workers=[
            Worker(
                name="optimist",
                description="finds strengths",
                definition=LoopDefinition(
                    name="optimist",
                    model=ScriptedModel(lambda _r: Reply(text="Structured concurrency.")),
                ),
            ),
            Worker(
                name="sceptic",
                description="finds weaknesses",
                definition=LoopDefinition(
                    name="sceptic",
                    model=ScriptedModel(lambda _r: Reply(text="A smaller ecosystem.")),
                ),
            ),
        ],
    )


def claude(model: AnthropicModel) -> Collaboration:
    def worker(name: str, brief: str) -> Worker:
        return Worker(
            name=name,
            description=brief,
            definition=LoopDefinition(name=name, model=model, system=brief),
        )

    return Collaboration(
        coordinator=LoopDefinition(
            name="coordinator",
            model=model,
            system="You coordinate two workers to weigh a decision; be brief.",
        ),
        workers=[worker("optimist", "You find strengths."), worker("sceptic", "You find risks.")],
        max_turns=6,
    )


async def main() -> None:
    model = AnthropicModel.from_env()
    collab = claude(model) if model is not None else scripted()
    host = LoopDefinition(name="host", model=ScriptedModel())
    async with open_journal("sqlite:///examples.db") as journal:
        async with Session.create(journal, host) as s:
            output = await s.collaborate(collab, "Should we use trio for our agent runtime?")
            print(f"session {s.id}: {output}")


if __name__ == "__main__":
    trio.run(main)
