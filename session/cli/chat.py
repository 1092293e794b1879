"""``loopruntime chat``: a person talking to a loop in a terminal.

Claude when ``ANTHROPIC_API_KEY`` is set, else a local echo model;
``--model openai:NAME`` an OpenAI-compatible model (with ``OPENAI_API_KEY``
or a server's ``--base-url``).  Replies stream as they arrive; Ctrl-C
interrupts the reply, never the program; a failed reply is said in the
conversation.
"""

from __future__ import annotations

import signal
from typing import Any

import trio

from journal import open_journal
from journal.content import Message, Text, TextDelta
from loopruntime import LoopDefinition
from loopruntime.models import ScriptedModel

from ..embedded.runtime import Session
from ..embedded.subscriptions import StreamDelta

__all__ = ["PROVIDERS", "chat_definition", "run_chat"]

PROVIDERS = ("anthropic", "openai")
"""The prefixes ``--model`` may name a provider with (``openai:NAME``); a
name without one is Claude's."""


def chat_definition(
    model_name: str | None, base_url: str | None = None
) -> tuple[LoopDefinition, str]:
    """The chat's loop and a line saying which model it talks to.

    ``openai:NAME``: an OpenAI-compatible model, which needs OPENAI_API_KEY or
    a server (``base_url``, or OPENAI_BASE_URL).  Otherwise Claude when
    ANTHROPIC_API_KEY is set, else the local echo brain.  Raises
    ``ValueError`` (an unknown provider, a missing key) or
    ``MissingExtraError`` before anything is opened.
    """
    provider, colon, name = (model_name or "").partition(":")
    if not colon:
        provider, name = "anthropic", model_name or ""
    if provider not in PROVIDERS:
        raise ValueError(
            f"--model {model_name}: unknown provider {provider!r}; name one of "
            f"{', '.join(p + ':NAME' for p in PROVIDERS)}, or a Claude model alone"
        )
    if colon and not name:
        raise ValueError(f"--model {model_name}: the model's name is missing after {provider}:")
    if provider == "openai":
        model: Any = _openai_model(name, base_url)
        said = f"using {model.name}"
    elif base_url is not None:
        raise ValueError(
            "--base-url names an OpenAI-compatible server, for --model openai:NAME "
            "(Claude's is ANTHROPIC_BASE_URL)"
        )
    else:
        model, said = _claude_or_echo(name or None)
    return LoopDefinition(name="chat", model=model, system="You are a helpful assistant."), said


def _claude_or_echo(name: str | None) -> tuple[Any, str]:
    """Claude when ANTHROPIC_API_KEY is set, else the local echo brain."""
    from loopruntime.models.anthropic import AnthropicModel

    model: Any = AnthropicModel.from_env(model=name)
    if model is not None:
        return model, f"using {model.name}"
    said = "no ANTHROPIC_API_KEY: using the local scripted echo model"
    if name:
        said += f" (--model {name} needs the key, so it is not used)"
    return ScriptedModel.echo(), said


def _openai_model(name: str, base_url: str | None) -> Any:
    from loopruntime.models import OpenAIModel  # MissingExtraError without the extra

    model = OpenAIModel.from_env(name, base_url=base_url)
    if model is None:
        raise ValueError(
            f"--model openai:{name} needs OPENAI_API_KEY, or the address of an "
            "OpenAI-compatible server: --base-url URL (or OPENAI_BASE_URL)"
        )
    return model


# How many of a resumed session's last messages are shown before the prompt.
_RESUMED_MESSAGES = 6


async def run_chat(url: str, session_id: str | None, chosen: tuple[LoopDefinition, str]) -> int:
    """The interactive chat on the journal at ``url``: a new session, or
    ``session_id`` resumed with its last exchanges shown first; ``chosen`` is
    what ``chat_definition`` returned."""
    definition, said = chosen
    print(f"loopruntime chat — {said}. Ctrl-C stops a reply, Ctrl-D quits.", flush=True)
    async with open_journal(url) as journal:
        opener = (
            Session.restore(journal, session_id, definition)
            if session_id
            else Session.create(journal, definition)
        )
        async with opener as s:
            print(f"session {s.id}", flush=True)
            if session_id:
                _show_history((await s.snapshot()).messages[-_RESUMED_MESSAGES:])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_print_stream, s)
                nursery.start_soon(_interrupt_on_sigint, s)
                while True:
                    line = await trio.to_thread.run_sync(_read_line, abandon_on_cancel=True)
                    if line is None:
                        break
                    if not line.strip():
                        continue
                    await s.submit(line)
                    await s.wait_idle()
                    print(flush=True)
                    state = await s.snapshot()
                    if state.last_outcome == "failed":
                        # The reply failed: say so in the conversation, not only in a log.
                        why = state.last_failure or "no reason was given"
                        print(f"[the reply failed: {why}]", flush=True)
                nursery.cancel_scope.cancel()
    return 0


def _show_history(messages: list[Message]) -> None:
    """The last exchanges of a resumed session, as the chat showed them."""
    for message in messages:
        text = " ".join(b.text for b in message.blocks if isinstance(b, Text)).strip()
        if not text:
            continue  # tool calls and results: the transcript (`replay`) shows them
        print(f"{'you> ' if message.role == 'user' else ''}{text}", flush=True)
    if messages:
        print("[earlier messages: `loopruntime replay SESSION`]", flush=True)


def _read_line() -> str | None:
    try:
        return input("you> ")
    except EOFError:
        return None


async def _print_stream(s: Session) -> None:
    """Print reply text as it streams (live deltas, not the journal).  Subscribes
    from the session's own head when it starts: the journal's head may already
    be past it while the session folds what it just committed."""
    async for item in s.subscribe(after=None, deltas=True):
        if isinstance(item, StreamDelta) and isinstance(item.delta, TextDelta):
            print(item.delta.text, end="", flush=True)


async def _interrupt_on_sigint(s: Session) -> None:
    # Ctrl-C stops the reply, never the program: the chat keeps going.
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if await s.interrupt():
                print("\n[interrupted]", flush=True)
            else:
                print("\n(nothing to interrupt; Ctrl-D quits)", flush=True)
