"""The turn machine: model call -> tool batch -> model call -> ... -> turn.ended.

A turn is driven from loop state alone, so the same code starts a fresh turn
and resumes one after restore: if the last assistant message still has
unanswered tool calls, run the batch; if the context ends with an assistant
message, decide how the turn goes on; otherwise call the model.

Interruption cancels the turn's scope; the settlement afterwards runs outside
it and commits what had happened: the partial reply with its notice, the
abandoned tool calls, the cancelled gates, and ``turn.ended(interrupted)``.
The turn's deadline (``Limits.turn_timeout``) settles it the same way, with
``deadline.passed`` first and ``turn.ended(limit)``.  What a settlement
commits is ``settling.py``'s, shared with restore.

A model call runs under two deadlines (``deadlines.py``): its first piece of
output must arrive within ``model_first_token_timeout``, and each attempt
may stream ``model_call_timeout`` in all.  A call cut before any output is
sent again with backoff (``model_retries`` times); one cut after output keeps
what arrived with the truncated notice, and the turn fails.

A tool call whose deadline left its outcome unknown parks the turn: the task
ends without settling it, and the loop resumes it once the host resolved
the call (as after a restore).

The module is one piece: the steps, the model call and the settlement all
read and change one runner's state (its accumulator, the calls it entered).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, NamedTuple

import msgspec
import trio

from journal.content import BlockStopped, Message, Piece, ToolUse
from journal.events import (
    ContextMeasured,
    DeadlinePassed,
    Event,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    Outcome,
    SteerApplied,
    TurnEnded,
)

from . import budgets, deadlines, hooks
from .batch import run_batch
from .deferred import advertised
from .direct import direct_verdict
from .errors import ModelError
from .ids import new_id
from .model import Accumulator, ModelRequest, coalesce
from .notices import BUDGET_EXHAUSTED, TRUNCATED_TOOL_CALL_RESULT, rejected
from .output import output_reminder, output_verdict
from .ports import TurnPort
from .principals import stamped_end
from .redaction import journaled_message, secret_piece
from .settling import queue_consequences, reply_cut_short, settle_turn_events
from .state import LoopState

__all__ = ["FLUSH_INTERVAL", "StopReason", "TurnResult", "TurnRunner", "TurnStop"]

# Exact types: ``isinstance`` on the union pays a slow check per member it fails.
_PIECES = frozenset(Piece.__args__)

FLUSH_INTERVAL = 0.25
"""Streamed output reaches the journal at least this often (seconds)."""


class _End(Exception):
    """Internal: the turn has ended (its turn.ended is committed)."""


StopReason = Literal["interrupted", "shutdown", "detached"]
"""Why a turn is stopped: a person's interrupt, a shutdown, or a shutdown
that leaves the turn open as the journal holds it (it only waited on people)."""


class TurnStop(NamedTuple):
    """What the loop hands a turn it stops (``TurnRunner.stop``)."""

    reason: StopReason
    cause: str | None = None
    """Id of the record of the command stopping the turn (its settlement's
    cause); None: the turn's own record."""
    principal: str | None = None
    """Who asked for the interrupt (its ``turn.ended`` records it)."""


class TurnResult(NamedTuple):
    """How a turn's run ended, returned by ``TurnRunner.run``."""

    outcome: Outcome | None
    """The outcome its ``turn.ended`` committed; None: the turn is still open
    (it waits for an unknown outcome to be resolved, or was detached)."""


class TurnRunner:
    """Runs the loop's open turn to its ``turn.ended`` (or to its cancellation)."""

    def __init__(self, loop: TurnPort) -> None:
        self.loop = loop
        self.resolved = loop.resolved()
        self.acc: Accumulator | None = None
        self.entered: set[str] = set()
        """Execution ids whose tool function this turn actually called."""
        self._log: Any = None
        self.parked = False
        """The turn waits for the host to resolve an unknown outcome."""
        self.held = False
        """The turn waits, between two steps, for its loop's (or an
        ancestor's) pause to end: nothing of it runs, so a shutdown leaves
        it open as the journal holds it."""
        self._scope: trio.CancelScope | None = None
        self._stop: TurnStop | None = None
        every = loop.definition.hooks
        self.before_model = [h for h in every if h.point == "before_model"]
        self.turn_end = [h for h in every if h.point == "turn_end"]
        self.redacting = {
            t.name: t.redact_input for t in self.resolved.tools if t.redact_input is not None
        }
        """The tools whose calls' inputs the journal holds redacted (``redaction``)."""
        self.direct = frozenset(t.name for t in self.resolved.tools if t.direct)
        """The tools whose results may be the turn's answer (``direct``)."""

    @property
    def state(self) -> LoopState:
        return self.loop.state

    @property
    def log(self) -> Any:
        """The loop's logger bound to this turn, bound on first use (costly)."""
        if self._log is None:
            self._log = self.loop.log.bind(turn=self.loop.state.turn_index)
        return self._log

    def stop(self, stop: TurnStop) -> None:
        """Stop the turn (now, or as soon as it starts running); its settlement
        commits what ``stop`` says.  ``run`` returns once it has settled."""
        self._stop = stop
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> TurnResult:
        timeout = self.resolved.limits.turn_timeout
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._stop is not None:
                scope.cancel()
            with deadlines.timer(timeout) as clock:
                try:
                    await self._steps()
                except _End:
                    pass
        self._scope = None
        stop = self._stop or TurnStop("interrupted")
        if not self.state.turn_open or self.parked:
            pass
        elif clock.passed and not scope.cancel_called:
            assert timeout is not None
            self.log.warning("turn_deadline_passed", seconds=timeout)
            await self.loop.commit(self._settle_deadline(timeout), cause=self.state.turn_record)
        elif stop.reason != "detached":
            # Cancelled (interrupt or shutdown): settle outside the cancelled
            # scope.  A turn detached by a shutdown while it waited only on
            # people is left open as the journal holds it, for restore.
            await self.loop.commit(
                stamped_end(self._settle_interrupted(stop.reason), stop.principal),
                cause=stop.cause or self.state.turn_record,
            )
        if self.turn_end and not self.state.turn_open:
            await self._turn_end_hooks()
        if self.loop.logs(logging.DEBUG):
            self.log.debug("turn_finished", outcome=self.state.last_outcome, parked=self.parked)
        return TurnResult(None if self.state.turn_open else self.state.last_outcome)

    async def _turn_end_hooks(self) -> None:
        """The turn has ended: its hooks see the outcome and change nothing
        (a failure is logged; there is nothing left to refuse)."""
        state = self.state
        shown = hooks.TurnEnd(
            loop=self.loop.id,
            turn=state.turn_index,
            outcome=state.last_outcome or "",
            code=state.last_failure_code or None,
        )
        for name, failure in await hooks.turn_end(
            self.turn_end, shown, self.resolved.limits.hook_timeout
        ):
            self.log.warning("turn_end_hook_failed", hook=name, error=failure)

    # -- the steps --------------------------------------------------------------

    async def _steps(self) -> None:
        limits = self.resolved.limits
        while True:
            state = self.state
            if state.unknown:
                # A call's deadline left its outcome unknown: the host
                # resolves it, then the loop resumes the turn.
                self.parked = True
                return
            if self.loop.held_by_pause:
                await self._hold()
                continue
            if state.awaiting and state.last_stop_reason != "tool_use":
                # Only a reply that stopped for tool use admits execution: its
                # calls may be cut off or unintended.  Decided from state, so a
                # restored turn decides the same.
                uses = [state.tool_uses[i] for i in state.awaiting]
                await self._after_reply(uses, state.last_stop_reason)
                continue
            if state.awaiting:
                fresh = not state.results and not state.executions
                if fresh and state.turn_tool_batches > limits.max_tool_iterations:
                    uses = [state.tool_uses[i] for i in state.awaiting]
                    await self.end(
                        "limit",
                        kind="limit",
                        code="limit.tool_iterations",
                        settle=self._reject_all(
                            uses, "[not run: the turn's tool iteration limit was reached]"
                        ),
                    )
                await run_batch(
                    self.loop, self.resolved, self.entered, self.loop.requests.originals
                )
                continue
            output = self.resolved.output
            if self.direct and not state.steering:
                # The reply called direct tools only: their results answer.
                ended = direct_verdict(self.direct, output, state.messages)
                if ended is not None:
                    await self.end(**ended)
            if output is not None:
                # A typed answer was accepted, or the model used up its attempts.
                retries = self.resolved.limits.max_output_retries
                verdict = output_verdict(
                    output, state.messages, state.turn_output_failures, retries
                )
                if verdict is not None:
                    await self.end(**verdict)
            last = state.messages[-1] if state.messages else None
            if last is not None and last.role == "assistant":
                uses = [b for b in last.blocks if isinstance(b, ToolUse)]
                await self._after_reply(uses, state.last_stop_reason)
                continue
            if state.steering:
                await self.loop.commit(
                    [SteerApplied(steer_ids=tuple(s.steer_id for s in state.steering))],
                    cause=state.turn_record,
                )
            await self._model_call()

    async def _after_reply(self, uses: list[ToolUse], stop_reason: str | None) -> None:
        """Decide how the turn goes on after a committed assistant message
        (``uses``: its tool calls)."""
        state = self.state
        if uses and stop_reason == "tool_use":
            return  # the batch runs on the next step (state.awaiting is set)
        if uses and stop_reason == "max_tokens":
            # The reply was cut off while writing tool calls: tell the model,
            # run nothing, and let it try again.
            await self.loop.commit(
                self._reject_all(uses, TRUNCATED_TOOL_CALL_RESULT), cause=state.message_record
            )
            return
        if uses:
            await self.end(
                "failed",
                kind="model",
                code="model.tool_use_without_tool_use_stop",
                detail=f"the model asked for tools but stopped with {stop_reason!r}",
                settle=self._reject_all(uses, f"[not run: the reply stopped with {stop_reason}]"),
            )
        if stop_reason == "pause_turn" or state.steering:
            # pause_turn: the provider asks us to continue the same turn.
            # Steering that arrived during the reply gets its model call.
            await self._continue_after_reply()
            return
        if stop_reason == "refusal":
            await self.end("failed", kind="model", code="model.refusal")
        if self.resolved.output is not None:
            # It counts as an attempt, and the model is reminded.
            await self.loop.commit(output_reminder(), cause=self.state.message_record)
            return
        await self.end("completed")

    async def _continue_after_reply(self) -> None:
        """Go on within the turn after an assistant message: apply steering
        that arrived meanwhile (the next step calls the model with it), or
        call the model again at once (``pause_turn``)."""
        state = self.state
        if state.steering:
            await self.loop.commit(
                [SteerApplied(steer_ids=tuple(s.steer_id for s in state.steering))],
                cause=state.turn_record,
            )
        else:
            # Nothing new to say: a model call on a context ending with the
            # assistant's own message continues that message.
            await self._model_call()

    async def _hold(self) -> None:
        """The loop (or an ancestor) is paused: the step just finished was
        recorded, and the next waits here for the resume."""
        self.held = True
        await self.loop.run_outside(self.loop.wait_unpaused)
        self.held = False

    def _reject_all(self, uses: list[ToolUse], text: str) -> list[Event]:
        return [
            rejected(u.id, text)
            for u in uses
            # Only calls still waiting for a result: a call answered already
            # (e.g. its input was not JSON) is never answered twice.
            if u.id in self.state.awaiting and u.id not in self.state.results
        ]

    async def end(
        self,
        outcome: Outcome,
        *,
        kind: str | None = None,
        code: str | None = None,
        detail: str = "",
        settle: list[Event] | None = None,
        output: Any = None,
        cause: str | None = None,
        direct: tuple[str, ...] = (),
    ) -> None:
        """Commit ``turn.ended`` (with the queue consequences) and stop the turn.
        The records' cause is ``cause`` (a model call's), else the turn's."""
        events: list[Event] = list(settle or [])
        events.append(
            TurnEnded(
                turn=self.state.turn_index,
                outcome=outcome,
                kind=kind,
                code=code,
                detail=detail,
                output=output,
                direct=direct,
            )
        )
        events.extend(queue_consequences(self.state, outcome))
        await self.loop.commit(events, cause=cause or self.state.turn_record)
        raise _End

    # -- the model call -----------------------------------------------------------

    async def _model_call(self) -> None:
        """One model call: open it (its ``model.call_started``), stream
        attempts until one ends within its deadlines (or the retries are
        spent), then commit its message or the turn's failure."""
        call = await self._open_call()
        limits = self.resolved.limits
        first_token, whole = limits.model_first_token_timeout, limits.model_call_timeout
        opening = whole if first_token is None else min(first_token, whole or first_token)
        attempt = 1
        cut: DeadlinePassed | None = None
        while True:
            error, output, seconds = await self._stream_attempt(call, opening, whole)
            if seconds is None:
                break
            which: Literal["model_first_token", "model_call"] = (
                "model_first_token" if not output and opening == first_token else "model_call"
            )
            cut = await self._deadline_passed(call, which, seconds, attempt, output=output)
            if cut is None:
                attempt += 1
                continue
            error = _deadline_error(which, seconds, attempt, output=output)
            break
        if error is not None:
            await self._fail_call(call, error, cut)
        await self._finish_call(call)

    async def _open_call(self) -> _Call:
        """Check the call budget, run the ``before_model`` hooks, build the
        request and commit ``model.call_started``."""
        loop, state, resolved = self.loop, self.state, self.resolved
        # Checked here, not by the callers: every path to a model call (a
        # ``pause_turn`` continuation too) counts against the budget.
        if state.turn_model_calls >= resolved.limits.max_model_calls_per_turn:
            await self.end("limit", kind="limit", code="limit.model_calls")
        spent = budgets.exhausted(resolved.limits, state, loop.session_tokens)
        if spent is not None:
            await self.end(
                "limit",
                kind="limit",
                code=BUDGET_EXHAUSTED,
                detail=spent,
                settle=budgets.budget_notice(spent),
            )
        step = state.step + 1
        if self.before_model and state.hooks_step != step:
            await self._before_model_hooks(step)
        schemas = advertised(resolved.tools, resolved.deferred, state.loaded)
        request, fp = loop.requests.build(
            system=resolved.system,
            messages=state.messages,
            tools=schemas,
            max_tokens=resolved.limits.max_tokens,
        )
        effect_id = "call_" + fp + "_" + str(state.last_seq)
        started = ModelCallStarted(
            effect_id=effect_id,
            turn=state.turn_index,
            step=step,
            model=resolved.model.name,
            fingerprint=fp,
        )
        call = await loop.commit([started], cause=state.turn_record)
        return _Call(loop, effect_id, call[0].id, step, request)

    async def _stream_attempt(
        self, call: _Call, opening: float | None, whole: float | None
    ) -> tuple[ModelError | None, bool, float | None]:
        """Stream one attempt of ``call`` into a fresh accumulator, its
        pieces journaled within ``FLUSH_INTERVAL``.  Returns the error it
        failed with, whether any output arrived, and, when a deadline cut it,
        the seconds that deadline allowed (None: none did)."""
        loop, resolved = self.loop, self.resolved
        limits = resolved.limits
        acc = self.acc = Accumulator(limits.max_response_bytes, limits.max_tool_input_bytes)
        call.buffer = []
        error: ModelError | None = None
        output = False
        publish, loop_id, effect_id = loop.host.publish_delta, loop.id, call.effect_id
        with deadlines.timer(opening) as clock:
            try:
                boundary = False
                async with loop.outside(), resolved.model.stream(call.request) as stream:
                    async for delta in stream:
                        acc.feed(delta)
                        if self.redacting and secret_piece(delta, self.redacting, call.secret):
                            continue
                        publish(loop_id, effect_id, delta)
                        if type(delta) in _PIECES:
                            if not output:
                                # The first piece: from now on only the call's
                                # own deadline applies.
                                output = True
                                clock.reset(whole)
                            if boundary:
                                # A block ended: its pieces reach the journal as
                                # the next begins (the last block's ride with the
                                # message).  Our commit is no time of the model's.
                                with clock.paused():
                                    await call.flush()
                            if not call.buffer:
                                # Whatever happens to the stream, these pieces
                                # reach the journal within FLUSH_INTERVAL.
                                loop.flush_at(trio.current_time() + FLUSH_INTERVAL, call.flush)
                            call.buffer.append(delta)
                            boundary = type(delta) is BlockStopped
            except ModelError as exc:
                error = exc
            except Exception as exc:
                # An adapter bug must not take the loop down: the turn fails
                # with a code saying so, and the partial reply is kept.
                error = ModelError(f"model adapter failed: {exc!r}", kind="protocol")
            finally:
                loop.cancel_flush()
        if not clock.passed:
            return error, output, None
        seconds = clock.seconds if output else opening
        assert seconds is not None
        return error, output, seconds

    async def _deadline_passed(
        self,
        call: _Call,
        which: Literal["model_first_token", "model_call"],
        seconds: float,
        attempt: int,
        *,
        output: bool,
    ) -> DeadlinePassed | None:
        """A deadline cut attempt ``attempt``: None when the call is sent
        again (nothing arrived, retries left; ``deadline.passed(retried)``
        committed, the backoff slept), else the record the failure commits."""
        self.log.warning("model_deadline_passed", deadline=which, seconds=seconds, attempt=attempt)
        passed = DeadlinePassed(
            deadline=which,
            seconds=seconds,
            turn=self.state.turn_index,
            ref=call.effect_id,
            attempt=attempt,
            action="retried",
        )
        if not output and attempt <= self.resolved.limits.model_retries:
            # Nothing arrived, so nothing can be repeated: send it again.
            await self.loop.commit([passed], cause=call.record)
            await self.loop.run_outside(trio.sleep, deadlines.retry_backoff(attempt))
            return None
        acc = self.acc or Accumulator()
        return msgspec.structs.replace(
            passed, action="truncated" if acc.has_content() else "failed"
        )

    async def _fail_call(self, call: _Call, error: ModelError, cut: DeadlinePassed | None) -> None:
        """End the turn failed: what streamed, the call's failure, and the
        reply as far as it arrived."""
        self.log.warning("model_call_failed", code=error.code, error=str(error))
        await self.end(
            "failed",
            kind="model",
            code=error.code,
            detail=str(error),
            settle=[
                *([cut] if cut is not None else []),
                *self._rest(call.effect_id, call.buffer),
                ModelCallFailed(
                    effect_id=call.effect_id,
                    kind=error.error_kind,
                    code=error.code,
                    detail=str(error),
                    retryable=error.retryable,
                ),
                reply_cut_short(self.state, self.acc or Accumulator(), "truncated"),
            ],
            cause=call.record,
        )

    async def _finish_call(self, call: _Call) -> None:
        """Commit the reply: the rest of its pieces, its message, answers to
        its calls that cannot run, and the context's size (and the turn's end
        with them when the reply completes the turn)."""
        acc = self.acc or Accumulator()
        call_record = call.record
        events: list[Event] = [*self._rest(call.effect_id, call.buffer)]
        reply = self._message(call.effect_id, call.step)
        events.append(reply)
        # The call made its message; the message made the answers to its
        # calls that cannot run (so the message's id is chosen here).
        message_record = new_id("ev_")
        causes: list[str | None] = [call_record for _ in events]
        ids: list[str | None] = [None for _ in events]
        ids[-1] = message_record
        # Tool calls whose streamed input is not a JSON object are answered in
        # the same commit as the message, so the fold (live or restored)
        # never waits on a call that cannot run.
        for tool_use_id, why in acc.invalid_tool_inputs.items():
            text = (
                TRUNCATED_TOOL_CALL_RESULT
                if acc.stop_reason == "max_tokens"
                else f"[error: {why}; emit the call again with a JSON object]"
            )
            events.append(rejected(tool_use_id, text))
            causes.append(message_record)
            ids.append(None)
        causes.append(call_record)
        ids.append(None)
        events.append(
            ContextMeasured(
                input_tokens=acc.usage.input_tokens,
                output_tokens=acc.usage.output_tokens,
                cache_read_tokens=acc.usage.cache_read_tokens,
                cache_creation_tokens=acc.usage.cache_creation_tokens,
                window=self.resolved.model.context_window,
            )
        )
        if self._ends_the_turn(acc, reply.message):
            # The common last step: message and turn end in one commit.
            await self.end("completed", settle=events, cause=call_record)
        await self.loop.commit(events, ids=ids, causes=causes)
        self.acc = None

    async def _before_model_hooks(self, step: int) -> None:
        """Run the ``before_model`` hooks: commit the context they add (in one
        commit, so a restore runs none of them twice), or end the turn."""
        state = self.state
        verdict = await hooks.before_model(
            self.before_model,
            hooks.BeforeModel(
                loop=self.loop.id, turn=state.turn_index, step=step, messages=tuple(state.messages)
            ),
            self.resolved.limits.hook_timeout,
        )
        if verdict.stop is not None:
            code, detail = verdict.stop
            self.log.warning("turn_stopped_by_hook", code=code, detail=detail)
            await self.end("failed", kind="hook", code=code, detail=detail, settle=verdict.events)
        if verdict.events:
            await self.loop.commit(verdict.events, cause=state.turn_record)

    def _ends_the_turn(self, acc: Accumulator, message: Message) -> bool:
        """A reply after which the turn simply completes (what _after_reply
        would decide for it, decided before the commit); ``message``: its reply."""
        return (
            not any(type(b) is ToolUse for b in message.blocks)
            and self.resolved.output is None
            and not acc.invalid_tool_inputs
            and acc.stop_reason not in ("pause_turn", "refusal", "max_tokens")
            and not self.state.steering
        )

    @staticmethod
    def _rest(effect_id: str, buffer: list[Piece]) -> list[Event]:
        """The stream pieces not yet journaled, to commit with what ends the call."""
        return [ModelOutput(effect_id=effect_id, pieces=coalesce(buffer))] if buffer else []

    def _message(self, effect_id: str, step: int) -> ModelMessageCommitted:
        acc = self.acc or Accumulator()
        message = acc.message()
        if self.redacting:
            message = journaled_message(
                message, self.redacting, self.loop.requests.originals, self.log
            )
        return ModelMessageCommitted(
            effect_id=effect_id,
            turn=self.state.turn_index,
            step=step,
            message=message,
            stop_reason=acc.stop_reason,
            usage=acc.usage,
        )

    # -- interruption ----------------------------------------------------------------

    def _settle_deadline(self, seconds: float) -> list[Event]:
        """The turn's deadline passed: interrupted like by a person, ending
        with outcome ``limit``, the ``deadline.passed`` record first."""
        passed = DeadlinePassed(
            deadline="turn", seconds=seconds, turn=self.state.turn_index, action="interrupted"
        )
        return [
            passed,
            *self._settle_interrupted(
                "interrupted",
                outcome="limit",
                code="limit.turn_timeout",
                detail=(
                    f"the turn did not finish within its {seconds:g} s deadline "
                    "(Limits.turn_timeout) and was interrupted"
                ),
            ),
        ]

    def _settle_interrupted(
        self,
        reason: StopReason,
        *,
        outcome: Outcome = "interrupted",
        code: str | None = None,
        detail: str = "",
    ) -> list[Event]:
        state = self.state
        if state.open_call is not None and self.acc is None:
            # The call started but streamed nothing we hold: rebuild from the journal.
            self.acc = Accumulator()
            self.acc.feed_all(tuple(state.open_output))
        events = settle_turn_events(
            state,
            outcome=outcome,
            kind="limit",
            code=code,
            detail=detail,
            reply_end=(
                reply_cut_short(state, self.acc, "interrupted")
                if state.open_call is not None and self.acc is not None
                else None
            ),
            gate_reason="shutdown" if reason == "shutdown" else "interrupted",
            entered=self.entered,
        )
        return events


class _Call:
    """One model call of a turn: what its attempts share."""

    __slots__ = ("buffer", "effect_id", "loop", "record", "request", "secret", "step")

    def __init__(
        self, loop: TurnPort, effect_id: str, record: str, step: int, request: ModelRequest
    ) -> None:
        self.loop = loop
        self.effect_id = effect_id
        self.record = record
        """Id of its ``model.call_started``: the cause of what it makes."""
        self.step = step
        self.request = request
        self.buffer: list[Piece] = []
        """Streamed pieces not yet journaled."""
        self.secret: set[int] = set()
        """Indexes of the reply's calls to redacting tools: their streamed
        input is neither journaled nor shown to subscribers."""

    async def flush(self) -> None:
        """Journal the buffered pieces (and drop the pending flush timer)."""
        self.loop.cancel_flush()
        if self.buffer:
            pieces, self.buffer = coalesce(self.buffer), []
            await self.loop.commit(
                [ModelOutput(effect_id=self.effect_id, pieces=pieces)], cause=self.record
            )


def _deadline_error(
    which: Literal["model_first_token", "model_call"],
    seconds: float,
    attempts: int,
    *,
    output: bool,
) -> ModelError:
    """The error a turn fails with when a model call's deadline passed for good."""
    if output:
        what = (
            f"the model's reply did not finish within the {seconds:g} s deadline of a model "
            "call (Limits.model_call_timeout); the reply is kept as far as it arrived, with "
            "the truncated notice, and was not sent again because that would repeat it"
        )
    else:
        field = f"{which}_timeout"
        what = (
            f"the model sent nothing within the {seconds:g} s deadline (Limits.{field}) "
            f"in {attempts} attempt{'s' if attempts != 1 else ''}; try again later, or raise "
            "the deadline"
        )
    return ModelError(
        what,
        kind="timeout",
        code="model.first_token_timeout" if which == "model_first_token" else "model.call_timeout",
        retryable=not output,
    )
