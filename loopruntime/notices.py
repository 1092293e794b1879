"""The runtime's own words in the transcript.

Notices are appended as the last text block of a stored message (or stand as
a synthetic tool result), so a reader and the model can always tell where the
runtime, not the model, is speaking.  A reply cut short before anything
usable arrived gets no message at all: its notice is a ``notice`` record for
readers only.  Notices never say who stopped a reply.
"""

from __future__ import annotations

from typing import Final

from journal.content import Text
from journal.events import ToolCompleted

__all__ = [
    "BUDGET_EXHAUSTED",
    "DENIED_RESULT",
    "EMPTY_RESULT",
    "FINAL_ANSWER",
    "INTERRUPTED_NOTICE",
    "INTERRUPTED_TOOL_RESULT",
    "NOT_RUN_RESULT",
    "OUTPUT_REQUIRED",
    "TRUNCATED_NOTICE",
    "TRUNCATED_TOOL_CALL_RESULT",
    "budget_exhausted",
    "deadline_failure",
    "deadline_unknown",
    "rejected",
    "tool_output_cut",
]

TRUNCATED_NOTICE = (
    "[truncated: the stream failed before this reply completed; "
    "the content above may be incomplete]"
)
INTERRUPTED_NOTICE = (
    "[interrupted: this reply was stopped before it completed; "
    "the content above is what had arrived]"
)
INTERRUPTED_TOOL_RESULT = (
    "[interrupted: this tool call was stopped before it completed; its outcome is unknown]"
)
NOT_RUN_RESULT = "[not run: the turn was stopped before this tool call started]"
FINAL_ANSWER = "final_answer"
"""The name of the runtime's tool through which the model gives a typed
answer (``output.py``)."""
OUTPUT_REQUIRED = "output_required"
"""The code of the notice committed when a reply ended without the typed
answer the loop asks for (the model is then reminded, as steering)."""
DENIED_RESULT = "[denied: this tool call was denied by the user]"
EMPTY_RESULT = "[error: empty result: the tool returned nothing]"
TRUNCATED_TOOL_CALL_RESULT = (
    "[cut off: this tool call was cut off by the output token limit and was not run; "
    "emit the call again, with shorter input if you can]"
)


BUDGET_EXHAUSTED: Final = "budget_exhausted"
"""The code of a turn ended by a token budget (``turn.ended``, its notice) and
the reason of a submit refused by one (``turn.rejected``)."""


def budget_exhausted(detail: str) -> str:
    """What the model and the person read when a token budget ended the turn."""
    return (
        f"[budget exhausted: {detail}; the turn was stopped before another model call. "
        "Whatever was asked and not yet done is left undone]"
    )


def tool_output_cut(limit: int) -> str:
    """The in-band marker ending a tool result that was cut to ``limit`` bytes."""
    return f"[truncated: tool output exceeded {limit} bytes]"


def deadline_failure(tool: str, seconds: float, *, attempts: int, atomic: bool) -> str:
    """The result the model reads for a call cancelled at its deadline whose
    cancellation left nothing behind (an atomic tool, or a replay-safe one
    that used up its runs)."""
    runs = "" if attempts == 1 else f" in any of {attempts} runs"
    why = (
        "it is atomic, so the cancelled call had no effect"
        if atomic
        else "running it again is safe, but it may go on taking too long"
    )
    return (
        f"[error: tool {tool} did not finish within its {seconds:g} s deadline{runs} "
        f"and was cancelled; {why}]"
    )


def deadline_unknown(execution_id: str, tool: str, seconds: float) -> str:
    """The notice naming a call cancelled at its deadline whose outcome is unknown."""
    return (
        f"tool call {execution_id} ({tool}) did not finish within its {seconds:g} s deadline "
        "and was cancelled; it may or may not have acted, so it will not be re-run: resolve "
        "it with `loopruntime resolve` or Session.resolve before the turn can go on"
    )


def rejected(tool_use_id: str, text: str, *, execution_id: str = "") -> ToolCompleted:
    """The answer to a call that never ran (denied, unknown tool, invalid
    input, a limit, a stopped turn): ``text`` stands as its result."""
    return ToolCompleted(
        execution_id=execution_id,
        tool_use_id=tool_use_id,
        content=(Text(text=text),),
        disposition="rejected",
    )
