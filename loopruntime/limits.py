"""How much a loop may do: the counts, sizes and times of ``Limits``, each
checked when the definition is made."""

from __future__ import annotations

from dataclasses import dataclass

from .deadlines import check_timeout

__all__ = ["Limits"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Per-turn budgets and deadlines.  Hitting a budget ends the turn with
    outcome ``limit`` (or gives the model visible feedback, where that is the
    better behaviour); what each deadline does is told in docs/boundaries.md.

    Checked when made: a budget that is zero or negative (a token budget may
    also be None, no bound), a timeout that is
    not a positive number of seconds (or None), or a retry count below zero
    raises ``ValueError`` (``TypeError`` for a value of the wrong type)
    naming the field."""

    max_model_calls_per_turn: int = 50
    max_tool_iterations: int = 25
    """Tool batches (model replies asking for tools) per turn."""
    max_tool_calls_per_turn: int = 200
    max_parallel_tool_calls: int = 8
    max_tool_result_bytes: int = 100_000
    max_tokens: int = 4096
    """Output token budget of each model call."""
    compact_at: float | None = 0.85
    """Compact between turns once the measured context passes this fraction
    of the model's window (None: never automatically)."""
    retained_exchanges: int = 2
    """Newest complete user-led exchanges kept verbatim after a compaction."""
    tool_timeout: float | None = None
    """Seconds a tool call may run (a tool's own ``@tool(timeout=...)``
    overrides it); None: no deadline.  Time waiting on a person's answer
    does not count."""
    tool_retries: int = 1
    """Times a replay-safe tool call that passed its deadline runs again
    (under the same execution id) before it fails visibly to the model."""
    model_first_token_timeout: float | None = 120.0
    """Seconds from sending a model request to the first piece of its reply."""
    model_call_timeout: float | None = 600.0
    """Seconds one attempt of a model call may stream in all."""
    model_retries: int = 2
    """Times a model call that passed a deadline before any output is sent
    again (with backoff) before the turn fails."""
    turn_timeout: float | None = None
    """Seconds a turn may run; when it passes, the turn is interrupted and
    ends with outcome ``limit``.  Time waiting on a person does not count."""
    max_output_retries: int = 3
    """Times the model may try again after a typed answer that did not
    validate (or a reply without one) before the turn ends with outcome
    ``invalid_output``."""
    max_queued_inputs: int = 64
    """Inputs a loop holds queued behind its running turn; one more is refused
    (``QueueFullError``, and a ``turn.rejected`` record)."""
    hook_timeout: float | None = 30.0
    """Seconds a hook or an async permission classifier may take (its own
    ``timeout=`` overrides it); one that passes it fails closed (a hook) or
    counts as ``ask`` (a classifier)."""
    max_input_bytes: int = 8 * 1024 * 1024
    """Bytes one command's content may take as the journal stores it: a
    ``submit``'s message, a steering text, a host's ``resolve`` result.
    More is refused with ``PayloadTooLargeError`` before anything is written."""
    max_input_blocks: int = 100
    """Content blocks one ``submit``'s message may hold."""
    max_answer_bytes: int = 100_000
    """Bytes (UTF-8) of a person's answer at a gate: a question's text, a
    form's JSON, a URL gate's value."""
    max_tool_input_bytes: int = 1024 * 1024
    """Bytes of one tool call's JSON input as the model streams it; a larger
    call does not run and the model is told why in its result."""
    max_response_bytes: int = 4 * 1024 * 1024
    """Bytes one model reply may stream (text, thinking, tool input); past it
    the call is stopped, nothing of the reply enters the context, and the
    turn fails with code ``model.response_too_large``."""
    max_turn_tokens: int | None = None
    """Tokens (``budgets.py`` says which count) a turn's model calls, and the
    delegates' children it started, may spend; once reached, the turn makes
    no further model call and ends with outcome ``limit``, code
    ``budget_exhausted``.  None: no bound."""
    max_session_tokens: int | None = None
    """Tokens every loop of the session may spend together; once reached, a
    turn ends as above and a submit is refused (``BudgetExhaustedError``, and
    a ``turn.rejected`` record).  None: no bound."""
    max_progress_per_second: int = 4
    """Progress records (``ToolContext.progress``) one tool call commits per
    second; faster reports are coalesced into the newest, which is always
    recorded (at the latest when the call ends)."""
    max_progress_bytes: int = 2048
    """Bytes (UTF-8) of one progress message; a longer one is refused with
    ``ProgressTooLargeError`` and nothing is recorded."""

    def __post_init__(self) -> None:
        for name in (
            "max_model_calls_per_turn",
            "max_tool_iterations",
            "max_tool_calls_per_turn",
            "max_parallel_tool_calls",
            "max_tool_result_bytes",
            "max_tokens",
            "max_queued_inputs",
            "max_input_bytes",
            "max_input_blocks",
            "max_answer_bytes",
            "max_tool_input_bytes",
            "max_response_bytes",
            "max_progress_per_second",
            "max_progress_bytes",
        ):
            _check_count(name, getattr(self, name), least=1)
        for name in ("retained_exchanges", "tool_retries", "model_retries", "max_output_retries"):
            _check_count(name, getattr(self, name), least=0)
        for name in ("max_turn_tokens", "max_session_tokens"):
            if getattr(self, name) is not None:
                _check_count(name, getattr(self, name), least=1)
        for name in (
            "tool_timeout",
            "model_first_token_timeout",
            "model_call_timeout",
            "turn_timeout",
            "hook_timeout",
        ):
            check_timeout(f"Limits.{name}", getattr(self, name))
        compact_at = self.compact_at
        if compact_at is not None:
            if isinstance(compact_at, bool) or not isinstance(compact_at, int | float):
                raise TypeError(
                    f"Limits.compact_at must be a fraction of the context window or None, "
                    f"not {type(compact_at).__name__} {compact_at!r}"
                )
            if not 0 < compact_at <= 1:
                raise ValueError(
                    f"Limits.compact_at must be above 0 and at most 1 (a fraction of the "
                    f"context window), not {compact_at!r}; use None to never compact "
                    "automatically"
                )


def _check_count(name: str, value: object, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Limits.{name} must be an int, not {type(value).__name__} {value!r}")
    if value < least:
        if least == 1:
            raise ValueError(
                f"Limits.{name} must be 1 or more, not {value}: with no budget, what it "
                "limits could never happen"
            )
        raise ValueError(f"Limits.{name} must be 0 or more, not {value}")
