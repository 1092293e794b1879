"""A person as a worker: each task asks a person, and the answer is the
task's output.

The worker is an ordinary loop whose model is a fixed script: its first reply
calls ``ask_person`` with the task's input, which opens an input gate (durable
before anyone can answer it, open across a restore); its second reply is the
answer, word for word.  So a person's task starts, is steered, cancelled,
restored and replayed like any other worker's, and is answered with
``Session.answer(gate_id, text)``.
"""

from __future__ import annotations

from journal.content import Text, ToolResult
from loopruntime import LoopDefinition, ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall

from .definition import Worker

__all__ = ["person"]


@tool(permission="allow", resumable=True)
async def ask_person(ctx: ToolContext, *, question: str) -> str:
    """Ask the person the task's question and return their answer."""
    return await ctx.ask_user(question)


def _answer(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        return Reply(text="".join(b.text for b in results[-1].content if isinstance(b, Text)))
    question = "\n".join(b.text for b in last.blocks if isinstance(b, Text))
    return Reply(tool_calls=[ToolCall(name="ask_person", input={"question": question})])


def person(name: str, description: str = "") -> Worker:
    """A worker named ``name`` whose tasks a person answers (through the input
    gate each task opens)."""
    return Worker(
        name=name,
        description=description,
        definition=LoopDefinition(
            name=name,
            model=ScriptedModel(_answer, name="person"),
            tools=[ask_person],
        ),
    )
