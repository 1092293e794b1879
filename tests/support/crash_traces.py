"""The crash-point scenario with a trace exporter following the session.

* ``crash-traces WORKDIR KILL_AFTER`` runs ``crash_points``' scenario from nothing with an
  ``Exporter`` following the session, and is SIGKILLed after commit ``KILL_AFTER``;
* ``crash-traces-restore WORKDIR`` restores it with a new exporter following from the
  journal's head before the restore, and drives the scenario to its end.

Every span either process emits is one line of ``WORKDIR/spans`` (``phase`` and the
span's ids, name and parent), written with a single ``os.write`` so a SIGKILL never
leaves half a line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from journal import open_journal
from session import Session
from session.traces.otel import Exporter
from tests.support import crash_points
from tests.support.crash_points import SESSION, KillingJournal, Ledger, definition, drive


class FileSpans(SpanExporter):
    """Appends each finished span to a file, one line per span."""

    def __init__(self, path: Path, phase: str) -> None:
        self.path, self.phase = path, phase

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            line = {
                "phase": self.phase,
                "trace": span.context.trace_id,
                "span": span.context.span_id,
                "parent": span.parent.span_id if span.parent is not None else None,
                "name": span.name,
            }
            crash_points._append_line(self.path, json.dumps(line))
        return SpanExportResult.SUCCESS


def _exporter(workdir: Path, phase: str) -> Exporter:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpans(workdir / "spans", phase)))
    return Exporter(provider)


async def run(workdir: str, kill_after: str) -> None:
    path = Path(workdir)
    ledger = Ledger(path, "run")
    async with open_journal(crash_points.journal_url(path)) as real:
        journal = KillingJournal(real, path, int(kill_after))
        async with trio.open_nursery() as nursery:
            async with Session.create(
                journal,
                definition(ledger),
                session_id=SESSION,
                checkpoint_every=crash_points.CHECKPOINT_EVERY,
            ) as s:
                nursery.start_soon(_exporter(path, "run").follow, s, 0)
                await drive(s, ledger)


async def restore(workdir: str) -> None:
    path = Path(workdir)
    ledger = Ledger(path, "restore")
    async with open_journal(crash_points.journal_url(path)) as journal:
        head = await journal.head(SESSION)
        (path / "head").write_text(str(head))
        async with trio.open_nursery() as nursery:
            async with Session.restore(
                journal, SESSION, definition(ledger), checkpoint_every=crash_points.CHECKPOINT_EVERY
            ) as s:
                # From the head before the restore: the records it settles are traced too.
                nursery.start_soon(_exporter(path, "restore").follow, s, head)
                await drive(s, ledger)
