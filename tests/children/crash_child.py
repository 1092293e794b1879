"""Child process for the delegation crash test: a lead starts three researchers
in parallel; READY once all three are streaming; then it waits to be killed."""

from __future__ import annotations

import sys

import trio

from journal import open_journal
from journal.events import ModelOutput
from loopruntime import Delegate, LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session


def team(lead_replies: list[Reply], researcher_reply: Reply) -> LoopDefinition:
    researcher = LoopDefinition(
        name="researcher", model=ScriptedModel(lambda _request: researcher_reply)
    )
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_replies),
        delegates=[
            Delegate(name="research", description="Research one topic", definition=researcher)
        ],
    )


SLOW = Reply(text="researching slowly " * 30, chunk_size=3, chunk_delay=0.05)
FAN_OUT = Reply(
    tool_calls=[ToolCall(name="research", input={"task": f"topic {i}"}) for i in range(3)]
)


async def main(url: str, session_id: str) -> None:
    async with open_journal(url) as journal:
        async with Session.create(journal, team([FAN_OUT], SLOW), session_id=session_id) as s:
            await s.submit("research three topics")
            streaming: set[str] = set()
            async for record in s.subscribe():
                if isinstance(getattr(record, "event", None), ModelOutput) and "/" in record.loop:
                    streaming.add(record.loop)
                    if len(streaming) == 3:
                        print("READY", flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
