"""A child process for the compaction crash test: it talks two exchanges,
asks for a compaction, says READY once the compactor is working (so
``compaction.started`` is durable), and waits to be SIGKILLed.

Usage: python -m tests.compaction.crash_child JOURNAL_URL SESSION_ID
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import trio

from journal import open_journal
from journal.content import Message
from loopruntime import Limits, LoopDefinition
from loopruntime.model import Model
from loopruntime.models import Reply, ScriptedModel
from session import Session

DEFINITION_NAME = "crash-compaction"
RETAINED = 1


class HangingCompactor:
    """Announces that it runs, then never returns."""

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        print("READY", flush=True)
        await trio.sleep_forever()
        raise AssertionError("unreachable")


def definition(model: ScriptedModel, compactor: object) -> LoopDefinition:
    """The definition both processes use (same name, same limits)."""
    return LoopDefinition(
        name=DEFINITION_NAME,
        model=model,
        limits=Limits(retained_exchanges=RETAINED),
        compactor=compactor,  # type: ignore[arg-type]
    )


async def main(url: str, session_id: str) -> None:
    d = definition(ScriptedModel([Reply(text="a1"), Reply(text="a2")]), HangingCompactor())
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id=session_id) as s:
            for text in ("u1", "u2"):
                await s.submit(text)
                await s.wait_idle()
            await s.compact()
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
