"""Delegation: a loop runs child loops, each shown to the model as a tool
(built with its ``Delegate`` in ``definition``; it runs ``run_delegate``
through the loop).

Rules: a child is its own actor in the same session; its provenance is in
``child.started``, its budget and tools come from its definition, never from
the model.  A foreground call waits for the child to settle and returns its
final text; cancelled, it interrupts the child first (cancellation cascades
down the tree).  A background call returns at once; the result comes back as
a notification input, ``child.finished`` and ``input.queued`` in one commit
(delivered exactly once).  Re-entered after a restore, a call re-attaches to
its child and never starts another.

A child whose start is refused (its configuration breaks a rule only its
start can check, such as an MCP server listing a tool name the child already
has) is a *rejected* call, not a failed one: ``child.finished`` says
``rejected``, and the model is shown a ``rejected`` result so it may choose
another worker.  A child that ran and failed fails the call.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import trio

from journal.content import Message, Text
from journal.events import ChildFinished, ChildStarted, Provenance

from .budgets import remaining, tokens_spent
from .commands import Interrupt, UserInput
from .definition import Delegate
from .errors import ChildRejectedError, DefinitionError, LoopClosedError
from .ids import new_id
from .ports import ChildLoop, ParentPort

__all__ = [
    "ChildFailedError",
    "ChildRejectedError",
    "ChildStatus",
    "child_outcome",
    "run_delegate",
]

ChildStatus = Literal["completed", "failed", "interrupted", "crashed"]


def child_outcome(child: ChildLoop) -> tuple[ChildStatus, str]:
    """How a settled child ended, and what its parent is told: its final
    assistant text or, when it did not complete, why (the error its turn ended
    with, such as the provider's message) when it is known."""
    state = child.state
    status: ChildStatus
    match state.last_outcome:
        case "completed":
            status = "completed"
        case "interrupted":
            status = "interrupted"
        case "crashed":
            status = "crashed"
        case _:
            status = "failed"
    text = ""
    for message in reversed(state.messages):
        if message.role == "assistant":
            text = "\n".join(b.text for b in message.blocks if isinstance(b, Text))
            break
    if status == "completed" and state.last_direct:
        # Answered by direct tools: their results are the answer, not the
        # text the model wrote beside its calls.
        answer = state.last_output
        text = (
            "\n\n".join(answer)
            if isinstance(answer, list) and all(isinstance(a, str) for a in answer)
            else msgspec.json.encode(answer).decode()
        )
    if status != "completed" and state.last_failure:
        # The last assistant text may be an earlier turn's: the reason is what counts.
        text = state.last_failure
    return status, text


async def run_delegate(
    loop: ParentPort, delegate: Delegate, task: str, *, execution_id: str
) -> str:
    """What ``delegate``'s tool does for the call ``execution_id`` of ``loop``:
    start the child (or re-attach to it after a restore), hand it ``task``, and
    return its result (foreground) or a note that it runs (background)."""
    child_id = f"{loop.id}/{delegate.name}@{execution_id.removeprefix('exe_')[:8]}"
    known = loop.state.children.get(child_id)
    if known is not None and known.status == "rejected":
        raise ChildRejectedError(known.output)  # refused before a restart: say so again
    if known is not None and known.status != "running":
        return known.output  # settled before a restart: report it again
    child = loop.child(child_id) if known is not None else None
    if child is None:
        allowance = _allowance(loop, delegate)
        provenance = Provenance(
            parent_loop=loop.id,
            turn=loop.state.turn_index,
            step=loop.state.step,
            execution_id=execution_id,
            token_allowance=allowance,
        )
        if allowance is not None and allowance <= 0:
            # Nothing is left to draw from: refused before it starts, so the
            # model may answer without it.
            reason = (
                f"delegate {delegate.name} was not started: no tokens are left of "
                "this turn's or session's budget (Limits.max_turn_tokens, max_session_tokens)"
            )
            await loop.commit(
                [
                    ChildStarted(
                        child_loop=child_id,
                        definition=delegate.child.name,
                        provenance=provenance,
                        background=delegate.background,
                    ),
                    ChildFinished(
                        child_loop=child_id, status="failed", output=reason, rejected=True
                    ),
                ],
                cause=execution_id,
            )
            raise ChildRejectedError(reason)
        await loop.commit(
            [
                ChildStarted(
                    child_loop=child_id,
                    definition=delegate.child.name,
                    provenance=provenance,
                    background=delegate.background,
                )
            ],
            cause=execution_id,
        )
        try:
            child = await loop.start_child(child_id, delegate.child, provenance, mode=delegate.mode)
        except DefinitionError as exc:
            reason = f"delegate {delegate.name} could not start its child: {exc}"
            await loop.commit(
                [ChildFinished(child_loop=child_id, status="failed", output=reason, rejected=True)]
            )
            raise ChildRejectedError(reason) from exc
        # The delegate call (its tool.started record) is the cause of the
        # child's first records.
        await child.send(
            UserInput(
                input_id=new_id("in_"),
                messages=(Message(role="user", blocks=(Text(text=task),)),),
                cause=execution_id,
            )
        )
    if delegate.background:
        loop.watch_background(child_id)
        return (
            f"started {delegate.name} in the background as child loop {child_id}; "
            "its result will arrive as a notification"
        )
    return await _foreground(loop, child, child_id)


async def _foreground(loop: ParentPort, child: ChildLoop, child_id: str) -> str:
    settled = False
    try:
        await loop.wait_child(child)
        settled = True
    finally:
        if not settled:
            # The parent's call is being cancelled: stop the child first, so
            # it commits its own interrupted notice; then record how it ended.
            with trio.CancelScope(shield=True):
                try:
                    await child.send(Interrupt())
                except LoopClosedError:
                    pass
                await _finish(loop, child, child_id)
    status, output = await _finish(loop, child, child_id)
    if status != "completed":
        raise ChildFailedError(f"child loop {child_id} {status}: {output or '(no output)'}")
    return output


async def _finish(loop: ParentPort, child: ChildLoop, child_id: str) -> tuple[ChildStatus, str]:
    """Record the child's end in the parent (once) and stop the child."""
    status, output = child_outcome(child)
    known = loop.state.children.get(child_id)
    if known is not None and known.status == "running":
        finished = ChildFinished(
            child_loop=child_id, status=status, output=output, tokens=tokens_spent(child.state)
        )
        await loop.commit([finished])
        await child.finish()
    return status, output


def _allowance(loop: ParentPort, delegate: Delegate) -> int | None:
    """Tokens a child of ``delegate`` may spend in all: what remains of the
    parent's budgets (and of the session's under the child's own limit)
    now; None: no budget bounds it."""
    session = loop.session_tokens()
    left = remaining(loop.resolved().limits, loop.state, session)
    own = delegate.child.limits_under(delegate.mode).max_session_tokens
    if own is not None:
        left = own - session if left is None else min(left, own - session)
    return left


class ChildFailedError(Exception):
    """A foreground child did not complete; its parent's tool call fails."""
