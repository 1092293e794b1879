"""A deadline that passes in the middle of a tool call, SIGKILLed at every commit.

The scenario (``deadline`` in tests/support/crash_scenarios.py) asks for three
things, each with a tool call cut by its deadline: a transfer whose outcome
becomes unknown (the host resolves it), a replay-safe lookup run again under
the same execution id, an atomic reservation that fails visibly.  For each k
it runs in a child process on a SQLite file and kills itself right after its
k-th append; a fresh process restores and drives it to its end.  Then:

* ``loopruntime replay SESSION --check`` passes (every invariant, the
  deadline rule among them);
* every record the killed process saw committed is still there, unchanged;
* the transfer, which is not replay-safe, never ran twice under one
  execution id, and no call with a committed outcome ran again;
* every request was answered, and the unknown transfer was settled by the
  host, not re-run.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
import trio

from journal import Record, open_journal
from journal.events import DeadlinePassed, ToolCompleted, ToolResolved, ToolStarted
from session.replay import replay_command
from tests.support import crash_scenarios as scenario
from tests.support.processes import run_child

pytestmark = pytest.mark.slow


async def _read(workdir: Path) -> list[Record]:
    async with open_journal(scenario.deadline_url(workdir)) as journal:
        return [r async for r in journal.read(scenario.DEADLINE_SESSION)]


def _runs(workdir: Path) -> list[tuple[str, str]]:
    path = workdir / "effects.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(e["tool"], e["execution"]) for e in map(json.loads, lines)]


async def _replay_check(workdir: Path) -> tuple[int, list[str]]:
    said: list[str] = []
    code = await replay_command(
        scenario.deadline_url(workdir),
        scenario.DEADLINE_SESSION,
        check_only=True,
        out=said.append,
        err=said.append,
    )
    return code, said


def _problems(workdir: Path, records: list[Record], seen: dict[int, str]) -> list[str]:
    problems: list[str] = []
    by_seq = {r.seq: r for r in records}
    lost = [s for s, d in seen.items() if s not in by_seq or by_seq[s].digest.hex() != d]
    if lost:
        problems.append(f"records seen committed before the kill changed or vanished: {lost}")
    last = max(seen, default=0)
    settled_before = {
        r.event.execution_id
        for r in records
        if r.seq <= last and isinstance(r.event, ToolCompleted | ToolResolved)
    }
    runs = _runs(workdir)
    transfers = Counter(exe for name, exe in runs if name == "transfer")
    twice = [exe for exe, n in transfers.items() if n > 1]
    if twice:
        problems.append(f"a transfer ran twice under one execution id: {twice}")
    names = {
        r.event.execution_id: r.event.name for r in records if isinstance(r.event, ToolStarted)
    }
    again = [
        exe
        for exe, n in Counter(exe for _, exe in runs).items()
        if exe in settled_before and n > 1 and names.get(exe) != "lookup"
    ]
    if again:
        problems.append(f"calls with a committed outcome ran again: {again}")
    records_text = [r.event for r in records]
    for step in scenario.DEADLINE_STEPS:
        if not scenario.deadline_step_done(records, step):
            problems.append(f"request {step!r} was not answered")
    resolved = [e for e in records_text if isinstance(e, ToolResolved)]
    if not any(e.by == "host" for e in resolved):
        problems.append("the unknown transfer was never resolved by the host")
    return problems


async def _crash_at(k: int, workdir: Path) -> tuple[str, list[str]]:
    await trio.Path(workdir).mkdir()
    killed = await run_child("deadline", str(workdir), str(k))
    if killed.returncode == 0:
        return "not reached", []
    if killed.returncode != -signal.SIGKILL:
        return "", [f"the scenario failed before its kill point: {killed.stderr.decode()[-2000:]}"]
    restored = await run_child("deadline-restore", str(workdir))
    if restored.returncode != 0:
        return "", [f"restore failed: {restored.stderr.decode()[-3000:]}"]
    seen = {
        int(seq): digest
        for seq, digest in (line.split() for line in (workdir / "seen").read_text().splitlines())
    }
    records = await _read(workdir)
    problems = _problems(workdir, records, seen)
    code, said = await _replay_check(workdir)
    if code != 0:
        problems.append("replay --check failed: " + "\n".join(said))
    last = max(seen)
    cut = [r.event for r in records if r.seq <= last and isinstance(r.event, DeadlinePassed)]
    return ("after a deadline" if cut else "before any deadline"), problems


async def test_a_deadline_mid_tool_call_survives_a_kill_at_every_commit(tmp_path: Path) -> None:
    clean = tmp_path / "baseline"
    clean.mkdir()
    done = await run_child("deadline", str(clean))
    assert done.returncode == 0, done.stderr.decode()
    records = await _read(clean)
    code, said = await _replay_check(clean)
    assert code == 0, said
    actions = [(e.deadline, e.action) for r in records if isinstance(e := r.event, DeadlinePassed)]
    # The clean run reaches every rule: unknown, retried (then it answers), failed.
    assert actions == [("tool", "unknown"), ("tool", "retried"), ("tool", "failed")]
    assert not _problems(clean, records, {})
    commits = int((clean / "appends").read_text())
    assert commits >= 10

    failures: dict[int, list[str]] = {}
    kinds: Counter[str] = Counter()
    limiter = trio.CapacityLimiter(2)

    async def one(k: int) -> None:
        async with limiter:
            kind, problems = await _crash_at(k, tmp_path / f"k{k:03}")
        kinds[kind] += 1
        if problems:
            failures[k] = problems

    async with trio.open_nursery() as nursery:
        for k in range(1, commits + 3):
            nursery.start_soon(one, k)
    report = "\n".join(
        f"kill after commit {k}:\n  " + "\n  ".join(p) for k, p in sorted(failures.items())
    )
    assert not failures, report
    # Kills fell both before the first deadline and after deadlines had passed.
    assert kinds["after a deadline"] >= 3 and kinds["before any deadline"] >= 1, kinds
    assert kinds["not reached"] <= 4, kinds
