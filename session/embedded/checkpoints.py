"""Session checkpoints: restore reads the tail, not the whole history.

* A checkpoint is exactly the fold of every record before it: the writer
  puts it in front of an append, when every loop has folded up to the head.
* A loop's messages go in as a delta on its previous image (``kept``); a
  chain starting afresh has ``previous=0`` and every loop in full.
* A checkpoint that cannot be used is logged and restore folds the whole
  history: checkpoints are derived data, never the only copy of anything.

docs/restore.md tells the whole story.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager

import msgspec
import structlog

from journal import Draft, Journal, JournalCorruptError, Record
from journal.content import Message
from journal.events import CHECKPOINT_STREAM, LoopImage, SessionCheckpoint, SessionForked
from loopruntime import Loop, LoopState, fold
from loopruntime.host import image_bytes, image_missing, image_state, new_id

__all__ = [
    "DEFAULT_EVERY",
    "Checkpointer",
    "InvalidCheckpointError",
    "Restored",
    "SessionFolder",
    "read_restored",
    "states_from",
]

log = structlog.wrap_logger(logging.getLogger(__name__))

DEFAULT_EVERY = 1_000
"""Records between checkpoints: restore folds at most about this many records
after reading the checkpoints; a checkpoint costs about what these records
added to the model context."""


class InvalidCheckpointError(Exception):
    """A checkpoint does not describe a state (restore then folds everything)."""

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        super().__init__(f"checkpoint at seq {seq} is unusable: {reason}")


class Restored(msgspec.Struct, kw_only=True):
    """What restore read: every loop's state, and where checkpointing stands."""

    states: dict[str, LoopState]
    checkpoint_seq: int = 0
    """seq of the last checkpoint restore started from (0: none, or not used)."""
    head: int = 0
    """seq of the last record the states hold (0: the session has none): a
    lease whose head is past it shows the journal moved after the read."""
    imaged: dict[str, int] = {}
    """Per loop whose context still begins with the chain's messages (no
    compaction since the last checkpoint), how many the chain holds."""


class Checkpointer:
    """Decides when the session writer adds a checkpoint, and builds it."""

    __slots__ = ("_forced", "_imaged", "_pending", "every", "last_seq")

    def __init__(self, every: int | None) -> None:
        if every is not None and (
            not isinstance(every, int) or isinstance(every, bool) or every < 1
        ):
            raise ValueError(
                f"checkpoint_every must be a positive number of records, not {every!r}"
            )
        self.every = every
        self.last_seq = 0
        # Per loop, the message list its last image was cut from and how many
        # of its messages the chain holds: while the loop's state still has
        # that very list, only the messages appended since need storing.
        self._imaged: dict[str, tuple[list[Message], int]] = {}
        self._pending: dict[str, tuple[list[Message], int]] | None = None
        self._forced = False

    def resume(self, restored: Restored) -> None:
        """Continue the chain restore started from."""
        self.last_seq = restored.checkpoint_seq
        for loop_id, count in restored.imaged.items():
            state = restored.states.get(loop_id)
            if state is not None:
                self._imaged[loop_id] = (state.messages, count)

    def draft(self, head: int, loops: Mapping[str, Loop]) -> Draft | None:
        """The checkpoint to append in front of the next records, or None.

        ``head`` is the session's last seq; every loop has folded up to it.
        Call ``written`` once the append succeeded; a draft that was never
        written is simply replaced by the next one."""
        if self.every is None or head - self.last_seq < (1 if self._forced else self.every):
            return None
        images = []
        pending: dict[str, tuple[list[Message], int]] = {}
        for loop_id, loop in loops.items():
            state = loop.state
            if not state.loop or (state.last_seq <= self.last_seq and loop_id in self._imaged):
                continue  # not started yet, or unchanged since the last checkpoint
            messages = state.messages
            before = self._imaged.get(loop_id)
            kept = before[1] if before is not None and before[0] is messages else 0
            if kept > len(messages):
                kept = 0
            images.append(
                LoopImage(
                    loop=loop_id,
                    state=image_bytes(state),
                    kept=kept,
                    messages=tuple(messages[kept:]),
                )
            )
            pending[loop_id] = (messages, len(messages))
        self._pending = pending
        event = SessionCheckpoint(previous=self.last_seq, loops=tuple(images))
        return Draft(id=new_id("cp_"), loop=CHECKPOINT_STREAM, event=event)

    def force(self) -> None:
        """Make the next draft due, if anything was appended since the last
        checkpoint (a session at rest, checkpointed before it is unloaded)."""
        self._forced = True

    def written(self, record: Record) -> None:
        self._forced = False
        self.last_seq = record.seq
        if self._pending is not None:
            self._imaged.update(self._pending)
            self._pending = None


def states_from(
    checkpoints: Sequence[Record], *, older_images: bool = False
) -> tuple[dict[str, LoopState], dict[str, int]]:
    """Every loop's state at the last of ``checkpoints`` (a session's chain, in
    seq order), and how many messages each got from the chain.  An image
    written before a state field existed is refused unless ``older_images``
    (the field then takes its default)."""
    messages: dict[str, list[Message]] = {}
    newest: dict[str, tuple[int, LoopImage]] = {}
    expected_previous = 0
    for record in checkpoints:
        event = record.event
        if not isinstance(event, SessionCheckpoint):
            raise InvalidCheckpointError(record.seq, f"it is a {type(event).__name__}")
        if event.previous == 0:
            # A new chain (a writer that restored without checkpoints): it
            # holds every loop in full, nothing of the older chain counts.
            messages.clear()
            newest.clear()
        elif event.previous != expected_previous:
            raise InvalidCheckpointError(
                record.seq,
                f"it follows the checkpoint at seq {event.previous}, "
                f"but the one before it is at seq {expected_previous}",
            )
        expected_previous = record.seq
        for image in event.loops:
            held = messages.setdefault(image.loop, [])
            if not 0 <= image.kept <= len(held):
                raise InvalidCheckpointError(
                    record.seq,
                    f"loop {image.loop} keeps {image.kept} messages of the "
                    f"{len(held)} its previous image holds",
                )
            del held[image.kept :]
            held.extend(image.messages)
            newest[image.loop] = (record.seq, image)
    states = {}
    for loop_id, (seq, image) in newest.items():
        try:
            state = image_state(image.state)
            missing = image_missing(image.state)
        except msgspec.DecodeError as exc:
            raise InvalidCheckpointError(seq, f"loop {loop_id}'s state: {exc}") from exc
        if missing and not older_images:
            raise InvalidCheckpointError(
                seq,
                f"loop {loop_id}'s image predates the state fields {', '.join(missing)}; "
                "the records are folded instead",
            )
        state.messages = messages[loop_id]
        states[loop_id] = state
    return states, {loop_id: len(held) for loop_id, held in messages.items()}


@contextmanager
def _collector_paused() -> Iterator[None]:
    # Folding allocates many long-lived objects and makes no cycles: the
    # cyclic collector would only rescan them again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


async def read_restored(
    journal: Journal, session_id: str, *, use_checkpoints: bool = True
) -> Restored:
    """Every loop of a session folded from its journal: from the last
    checkpoint on when there is one (and ``use_checkpoints``), else from seq 1."""
    with _collector_paused():
        if use_checkpoints:
            restored = await _restored_from_checkpoints(journal, session_id)
            if restored is not None:
                return restored
        states: dict[str, LoopState] = {}
        head = await _fold_into(states, journal, session_id, 0)
        return Restored(states=_loops(states), head=head)


async def _restored_from_checkpoints(journal: Journal, session_id: str) -> Restored | None:
    """The states from the checkpoints and the records after the last one,
    read together (``Journal.read_checkpointed``); None when the chain cannot
    be used (logged), and the caller folds every record instead."""
    try:
        # A damaged index, checkpoint or tail record spoils only this read:
        # the full read reads every record itself (and reports damage it
        # finds there as its own error).
        read = await journal.read_checkpointed(session_id)
    except JournalCorruptError as exc:
        log.warning("checkpoint_unusable", session=session_id, error=str(exc))
        return None
    states: dict[str, LoopState] = {}
    imaged: dict[str, int] = {}
    if read.checkpoints:
        try:
            states, imaged = states_from(read.checkpoints)
        except InvalidCheckpointError as exc:
            log.warning("checkpoint_unusable", session=session_id, error=str(exc))
            return None
    chained = {loop_id: state.messages for loop_id, state in states.items()}
    # Without checkpoints the tail is the history from seq 1, a fork's marker
    # and base first when the session is one: the folder knows them.
    folder = SessionFolder(states)
    for record in read.tail:
        folder.feed(record)
    head = max(folder.head, read.after)
    if not read.complete:
        head = max(head, await _fold_into(states, journal, session_id, head))
    # A compaction in the tail replaced a loop's context: the chain's
    # messages are no longer its prefix, so the next image of that loop
    # starts afresh.
    imaged = {
        loop_id: count
        for loop_id, count in imaged.items()
        if loop_id in states and states[loop_id].messages is chained.get(loop_id)
    }
    return Restored(states=_loops(states), checkpoint_seq=read.after, imaged=imaged, head=head)


async def _fold_into(
    states: dict[str, LoopState], journal: Journal, session_id: str, after: int
) -> int:
    """Fold the records after seq ``after`` into ``states``; the seq of the
    last one folded (0: none).

    The checkpoint stream is verified by the read but not decoded: its
    records change no state, and their loop images are about a quarter of
    the decoding a full fold would do.  The exception is a fork's base (its
    seq 2, which seq 1 marks as a fork): when a read from the start finds its
    first record past seq 1, or none at all, those first records are read
    again, whole.  ``SessionFolder.feed`` with its common case inline: a
    loop's record goes straight to ``fold``, without a method call per record."""
    folder = SessionFolder(states)
    state_of = states.get
    seq = 0
    async for record in journal.read(session_id, after=after, skip_stream=CHECKPOINT_STREAM):
        if not seq and after == 0 and record.seq > 1:
            await _fold_skipped_start(folder, journal, session_id, record.seq)
        seq = record.seq
        loop = record.loop
        state = state_of(loop)
        if state is None:
            state = states[loop] = LoopState()
        fold(state, record)
    if not seq and after == 0:
        # Nothing but checkpoint-stream records (or none): a fork not yet run.
        await _fold_skipped_start(folder, journal, session_id, None)
    return max(seq, folder.head)


async def _fold_skipped_start(
    folder: SessionFolder, journal: Journal, session_id: str, before: int | None
) -> None:
    """Feed ``folder`` the records before seq ``before`` (None: every one), all
    of the checkpoint stream (a fork's marker and base, when the session is one)."""
    records = journal.read(session_id)
    try:
        async for record in records:
            if before is not None and record.seq >= before:
                break
            folder.feed(record)
    finally:
        if isinstance(records, AsyncGenerator):
            await records.aclose()  # it stopped early: its reader goes now


class SessionFolder:
    """Folds a session's records, in seq order from seq 1, into every
    stream's state; a fork starts from the image its seq 2 holds (the
    source's state where it was cut), not from empty states.  Checkpoints
    are otherwise skipped: they are derived data and change no state."""

    __slots__ = ("forked", "head", "states")

    def __init__(self, states: dict[str, LoopState] | None = None) -> None:
        self.states: dict[str, LoopState] = {} if states is None else states
        self.head = 0
        self.forked: SessionForked | None = None
        """The session's ``session.forked`` marker, once read (None: not a fork)."""

    def feed(self, record: Record) -> None:
        self.head = record.seq
        if record.loop == CHECKPOINT_STREAM:
            event = record.event
            if record.seq == 1 and isinstance(event, SessionForked):
                self.forked = event
            elif record.seq == 2 and self.forked is not None:
                self.states.update(fork_base(record))
            return
        state = self.states.get(record.loop)
        if state is None:
            state = self.states[record.loop] = LoopState()
        fold(state, record)


def fork_base(record: Record) -> dict[str, LoopState]:
    """The states a fork starts from: its seq 2, a full checkpoint.  Unlike
    other checkpoints it is the only copy of that history in this session, so
    a bad one is damage (``JournalCorruptError``), not a reason to fold more."""
    if not isinstance(record.event, SessionCheckpoint) or record.event.previous != 0:
        raise JournalCorruptError(
            record.session,
            record.seq,
            "a fork's seq 2 must be a checkpoint starting a chain, "
            f"not {type(record.event).__name__}",
        )
    try:
        # Nothing to fold instead: a field added since the fork was cut
        # starts from its default, as it does in a loop started today.
        states, _ = states_from([record], older_images=True)
    except InvalidCheckpointError as exc:
        raise JournalCorruptError(record.session, record.seq, str(exc)) from exc
    return states


def _loops(states: dict[str, LoopState]) -> dict[str, LoopState]:
    # Streams without loop.started (a collaboration's) are not loops.
    return {loop_id: state for loop_id, state in states.items() if state.loop}
