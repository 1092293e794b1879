"""Every `loopruntime ...` command in README.md and docs/ is one the command
line takes: each line of a shell block parses with the CLI's own parser
(built, never run), and each option named in inline code beside a
`loopruntime` command is an option of that command."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest

from session.cli.main import parser
from tests.support.docs import PAGES, command_lines, inline_code, prose_paragraphs

COMMANDS = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def options_of(command: str) -> set[str]:
    found: set[str] = set()
    for action in COMMANDS[command]._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(o for a in sub._actions for o in a.option_strings)
    return found


def refusal(argv: list[str]) -> str | None:
    """What the parser says about ``argv``; None when it parses."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        try:
            parser().parse_args(argv)
        except SystemExit:
            return said.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_line_parses(page: Path) -> None:
    for line, argv in command_lines(page):
        problem = refusal(argv)
        assert problem is None, f"{page.name}:{line}: loopruntime {' '.join(argv)}: {problem}"


def named_options(text: str) -> list[tuple[str, set[str]]]:
    """``(option, the commands it may belong to)`` for each option a paragraph
    names in inline code: in a span with its command (`loopruntime replay
    --check`, `replay --check`), that command's; alone (`--tree`), any of the
    commands the paragraph names."""
    named: list[str] = []
    alone: list[str] = []
    found: list[tuple[str, set[str]]] = []
    for code in inline_code(text):
        words = code.removeprefix("loopruntime ").split()
        options = [m[1] for w in words if (m := re.match(r"\[?(--[a-z][a-z-]*)", w))]
        if words and words[0] in COMMANDS:
            named.append(words[0])
            found += [(o, {words[0]}) for o in options]
        elif words and words[0].startswith("--"):
            alone += options
    return found + [(o, set(named)) for o in alone] if named else found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_beside_a_command_is_one_it_takes(page: Path) -> None:
    for line, text in prose_paragraphs(page):
        for option, commands in named_options(text):
            known = set().union(*(options_of(c) for c in commands))
            assert option in known, (
                f"{page.name}:{line}: {option} is not an option of "
                f"loopruntime {' or '.join(sorted(commands))}"
            )


def unknown_commands(text: str) -> list[str]:
    """The commands named in inline code (`loopruntime NAME ...`) that the
    command line lacks; a placeholder (`loopruntime COMMAND`) names none."""
    return [
        words[1]
        for code in inline_code(text)
        if len(words := code.split()) > 1
        and words[0] == "loopruntime"
        and re.fullmatch(r"[a-z][a-z-]*", words[1])
        and words[1] not in COMMANDS
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_named_is_one_there_is(page: Path) -> None:
    for line, text in prose_paragraphs(page):
        assert unknown_commands(text) == [], f"{page.name}:{line}"


def test_the_checks_see_the_commands() -> None:
    lines = [argv for page in PAGES for _, argv in command_lines(page)]
    assert ["console", "--journal", "postgresql://app@db/agents"] in lines
    assert refusal(["replay", "SESSION", "--tree"]) is not None
    assert named_options("`loopruntime replay S` shows it, `--tree` a tree") == [
        ("--tree", {"replay"})
    ]
    assert named_options("`replay --check` and `loopruntime sessions`") == [("--check", {"replay"})]
