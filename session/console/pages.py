"""The console's HTML: small shells the script in ``static/console.js``
fills from the JSON endpoints.  Every value written here is escaped
(``html.escape``); the script writes journal text with ``textContent`` only.
"""

from __future__ import annotations

from html import escape

__all__ = ["list_page", "message_page", "session_page"]


def _shell(
    title: str,
    body: str,
    *,
    token: str | None,
    read_only: bool,
    page: str,
    principal: str | None = None,
) -> str:
    acting = (
        f'<span class="badge principal" id="principal">acting as {escape(principal)}</span>'
        if principal is not None
        else ""
    )
    meta = f'<meta name="console-token" content="{escape(token)}">' if token else ""
    mode = "read-only" if read_only else "acting"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{meta}
<title>{escape(title)}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/console.css">
</head>
<body data-page="{escape(page)}" data-mode="{mode}">
<header><a href="/" class="brand">loopruntime console</a>{
        '<span class="badge">read-only</span>' if read_only else ""
    }{acting}</header>
{body}
<script src="/static/console.js"></script>
</body>
</html>
"""


def list_page(token: str, read_only: bool, principal: str | None = None) -> str:
    body = """<main>
<h1>Sessions</h1>
<nav class="filters" id="filters" aria-label="filter by status"></nav>
<p id="problem" class="problem" hidden></p>
<table id="sessions">
<thead><tr><th>session</th><th>status</th><th>owner</th><th>last activity</th>
<th class="num">records</th><th class="num">tokens</th><th class="num">inbox</th></tr></thead>
<tbody></tbody>
</table>
<p id="empty" hidden>No sessions in this journal yet.</p>
</main>"""
    return _shell(
        "sessions", body, token=token, read_only=read_only, page="list", principal=principal
    )


def session_page(session: str, token: str, read_only: bool, principal: str | None = None) -> str:
    sid = escape(session)
    body = f"""<main id="session" data-session="{sid}">
<h1>session <code>{sid}</code> <span id="live" class="live">connecting…</span></h1>
<p id="problem" class="problem" hidden></p>
<section id="actions" class="actions" aria-label="waiting on you" hidden>
<h2>Waiting on you</h2>
<div id="gates"></div>
<div id="unknown"></div>
<div id="paused"></div>
</section>
<section aria-label="your actions"><ol id="outcomes" class="outcomes" hidden></ol></section>
<div class="tabs" role="tablist">
<button type="button" data-tab="transcript" class="on">transcript</button>
<button type="button" data-tab="tree">conversation tree</button>
<button type="button" data-tab="travel">time travel</button>
</div>
<section id="transcript" class="tab on" aria-label="transcript"><ol id="lines"></ol></section>
<section id="tree" class="tab" aria-label="conversation tree"><div id="tree-body"></div></section>
<section id="travel" class="tab" aria-label="time travel">
<form id="travel-form" class="travel">
<label>seq <input id="seq" type="number" min="1" value="1"></label>
<input id="slider" type="range" min="1" max="1" value="1" aria-label="seq">
<span id="seq-head"></span>
</form>
<pre id="states"></pre>
</section>
<aside id="record" class="record" hidden>
<h2>record <span id="record-seq"></span> <button type="button" id="record-close">close</button></h2>
<pre id="record-json"></pre>
</aside>
</main>"""
    return _shell(
        f"session {session}",
        body,
        token=token,
        read_only=read_only,
        page="session",
        principal=principal,
    )


def message_page(status: int, message: str, read_only: bool) -> str:
    """An error page; ``read_only`` is the console's, for its header's badge."""
    body = f"""<main><h1>{status}</h1><p class="problem">{escape(message)}</p>
<p><a href="/">the session list</a></p></main>"""
    return _shell(f"{status}", body, token=None, read_only=read_only, page="message")
