"""Time travel: each loop's state folded over the records up to a seq, and
how it prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from journal import Record
from journal.content import Image, Message, RedactedThinking, Text, Thinking, ToolResult, ToolUse
from loopruntime import LoopState

from ..embedded.checkpoints import SessionFolder
from .text import blocks_text, short


def states_at(records: Iterable[Record], seq: int) -> dict[str, LoopState]:
    """Each loop's state folded over the records with seq ≤ ``seq`` (pure).

    A fork's loops fold onto the state it was cut from (its seq 2), which
    is also its state at seq 1.  Raises ``FoldError`` when a record does not
    fit (``check`` says where)."""
    folder = SessionFolder()
    for r in records:
        if r.seq > seq and not (r.seq == 2 and folder.forked is not None):
            break
        folder.feed(r)
    return {loop: state for loop, state in folder.states.items() if state.loop}


def _message_line(m: Message) -> str:
    parts: list[str] = []
    for b in m.blocks:
        if isinstance(b, Text):
            parts.append(short(b.text, 120))
        elif isinstance(b, ToolUse):
            parts.append(f"[tool_use {b.name} {short(b.input, 60)}]")
        elif isinstance(b, ToolResult):
            err = " error" if b.is_error else ""
            parts.append(f"[tool_result{err} {short(blocks_text(b.content), 60)}]")
        elif isinstance(b, Thinking):
            parts.append(f"[thinking {len(b.thinking)} chars]")
        elif isinstance(b, RedactedThinking):
            parts.append("[redacted thinking]")
        elif isinstance(b, Image):
            parts.append(f"[image {b.media_type}]")
    marks = "".join(
        f" ({w})" for w, on in (("synthetic", m.synthetic), ("derived", m.derived)) if on
    )
    return f"{m.role}{marks}: " + " ".join(parts)


def render_states(states: dict[str, LoopState], seq: int) -> str:
    """What each loop knew as of ``seq``: status, context, queue, gates, effects."""
    out = [f"state as of seq {seq}"]
    for loop, st in states.items():
        out.append(
            f"loop {loop} ({st.definition}) status {st.status.value}, turn {st.turn_index}"
            + (", turn open" if st.turn_open else "")
            + (f", last outcome {st.last_outcome}" if st.last_outcome else "")
            + f", last seq {st.last_seq}"
        )
        out.append(f"  messages ({len(st.messages)}):")
        out.extend(f"    {i}. {_message_line(m)}" for i, m in enumerate(st.messages))
        if st.open_call is not None:
            out.append(f"  model call in flight: {st.open_call} ({len(st.open_output)} pieces)")
        for q in st.queued:
            text = " ".join(blocks_text(m.blocks) for m in q.messages)
            out.append(f"  queued input {q.input_id} ({q.trigger}): {short(text, 80)}")
        for steer in st.steering:
            out.append(f"  queued steering {steer.steer_id}: {short(steer.text, 80)}")
        for g in st.open_gates:
            out.append(f"  open gate {g.gate_id} ({g.kind}): {short(g.prompt, 80)}")
        for u in st.unknown_effects:
            out.append(f"  unknown effect {u.execution_id}: {u.name} {short(u.input, 60)}")
        for r in st.running.values():
            out.append(f"  running tool {r.execution_id}: {r.name} {short(r.input, 60)}")
    return "\n".join(out)
