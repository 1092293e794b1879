// The console's pages.  Journal text is only ever written with textContent
// (never innerHTML), so a tool result holding markup is shown, not run.
"use strict";

const tokenMeta = document.querySelector('meta[name="console-token"]');
const TOKEN = tokenMeta ? tokenMeta.content : "";
const READ_ONLY = document.body.dataset.mode === "read-only";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// Text longer than FOLD characters is drawn folded: its start, and a button
// that draws the rest a slice at a time.  A page never lays out megabytes at
// once (a reply, a tool's input or result, a record's JSON may be that big).
const FOLD = 4096;
const UNFOLD_STEP = 65536;

function folded(text, attrs) {
  if (text.length <= FOLD) return el("span", { ...attrs, text });
  let shown = FOLD;
  const head = document.createTextNode(text.slice(0, shown));
  const node = el("span", { ...attrs, "data-length": text.length }, head);
  node.classList.add("folded");
  const more = el("button", { type: "button", class: "unfold" });
  const label = () => {
    more.textContent = `… show more (${(text.length - shown).toLocaleString()} of ${text.length.toLocaleString()} characters hidden)`;
  };
  more.addEventListener("click", () => {
    shown = Math.min(text.length, shown + UNFOLD_STEP);
    head.textContent = text.slice(0, shown);
    if (shown >= text.length) {
      more.remove();
      node.classList.remove("folded");
    } else {
      label();
    }
  });
  label();
  node.append(more);
  return node;
}

function showProblem(text) {
  const p = document.getElementById("problem");
  if (!p) return;
  p.textContent = text || "";
  p.hidden = !text;
}

async function getJSON(path) {
  const response = await fetch(path, { headers: { "X-Console-Token": TOKEN } });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || `${response.status}`);
  return body;
}

async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Console-Token": TOKEN },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  return { status: response.status, body: answer };
}

function when(ns) {
  const d = new Date(ns / 1e6);
  return d.toLocaleString();
}

// -- the session list -------------------------------------------------------------

const STATUSES = ["waiting", "unknown", "paused", "crashed", "damaged", "host", "running", "idle"];

function listPage() {
  const tbody = document.querySelector("#sessions tbody");
  const filters = document.getElementById("filters");
  let rows = [];
  let wanted = new URLSearchParams(location.search).get("status");

  function render() {
    const counts = {};
    for (const r of rows) counts[r.status] = (counts[r.status] || 0) + 1;
    filters.replaceChildren(
      ...[null, ...STATUSES].map((s) =>
        el("button", {
          type: "button",
          class: s === wanted ? "on" : "",
          "data-status": s || "all",
          text: s ? `${s} (${counts[s] || 0})` : `all (${rows.length})`,
          onclick: () => {
            wanted = s;
            const url = new URL(location.href);
            if (s) url.searchParams.set("status", s);
            else url.searchParams.delete("status");
            history.replaceState(null, "", url);
            render();
          },
        })
      )
    );
    const shown = rows.filter((r) => !wanted || r.status === wanted);
    tbody.replaceChildren(
      ...shown.map((r) =>
        el(
          "tr",
          { "data-session": r.session, "data-status": r.status, class: `status-${r.status}` },
          el("td", {}, el("a", { href: `/sessions/${encodeURIComponent(r.session)}`, text: r.session })),
          el(
            "td",
            {},
            el("span", { class: `pill ${r.status}`, text: r.status_text, title: r.problem || "" }),
            r.detail ? el("div", { class: "detail", text: r.detail }) : null
          ),
          el("td", { text: r.owner ? `${r.owner}${r.owner_live ? "" : " (lease expired)"}` : "none" }),
          el("td", { text: when(r.last_activity) }),
          el("td", { class: "num records", text: String(r.records) }),
          el("td", { class: "num tokens", text: String(r.tokens) }),
          el("td", { class: "num", text: r.pending ? String(r.pending) : "" })
        )
      )
    );
    document.getElementById("empty").hidden = rows.length > 0;
  }

  whileVisible(() => {
    const source = new EventSource("/api/sessions/events");
    source.addEventListener("sessions", (ev) => {
      rows = JSON.parse(ev.data);
      showProblem("");
      render();
    });
    source.addEventListener("problem", (ev) => showProblem(JSON.parse(ev.data).message));
    source.onerror = () => showProblem("the console is not answering; retrying…");
    return source;
  });
}

// A browser keeps at most six HTTP/1.1 connections to one address and each
// live page holds one: a page in a hidden tab lets its stream go, and takes
// it up again (from where it was) when shown.
function whileVisible(connect) {
  let source = connect();
  document.addEventListener("visibilitychange", () => {
    if (document.hidden && source) {
      source.close();
      source = null;
    } else if (!document.hidden && !source) {
      source = connect();
    }
  });
}

// -- a session --------------------------------------------------------------------

function sessionPage() {
  const main = document.getElementById("session");
  const sid = main.dataset.session;
  const base = `/api/sessions/${encodeURIComponent(sid)}`;
  const lines = document.getElementById("lines");
  const live = document.getElementById("live");
  const streams = new Map();
  const keys = new Map();
  const awaited = new Map();
  let head = 0;

  function follow(work) {
    const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    work();
    if (atEnd) window.scrollTo(0, document.body.scrollHeight);
  }

  function lineOf(line) {
    const div = el("div", { class: "line" });
    div.style.paddingLeft = `${line.depth * 1.5}em`;
    for (const [kind, text] of line.spans) {
      if (text.length > FOLD) div.append(folded(text, kind ? { class: `k-${kind}` } : {}));
      else div.append(kind ? el("span", { class: `k-${kind}`, text }) : document.createTextNode(text));
    }
    return div;
  }

  function itemNode(item) {
    const seq = el("button", {
      type: "button",
      class: "seq",
      text: String(item.seq),
      title: "show this record's JSON",
      onclick: () => showRecord(item.seq),
    });
    const li = el("li", {
      "data-seq": item.seq,
      "data-id": item.id,
      "data-tag": item.tag,
      class: `tag-${item.tag.replace(/\./g, "-")}`,
    });
    li.append(seq, el("div", { class: "body" }, ...item.lines.map(lineOf)));
    return li;
  }

  function streamed(item, frag) {
    const s = item.stream;
    if (s.state === "open") {
      const text = el("span", { class: "k-assistant streaming" });
      const li = el(
        "li",
        { class: "stream", "data-effect": s.effect },
        el("span", { class: "seq", text: "…" }),
        el("div", { class: "body" }, el("div", { class: "line" }, el("span", { class: "k-assistant", text: "assistant: " }), text))
      );
      streams.set(s.effect, { li, text, full: "" });
      frag.append(li);
    } else if (s.state === "more") {
      const open = streams.get(s.effect);
      if (open) {
        // While it streams, a long reply shows its start and how much more came.
        open.full += s.text;
        open.text.textContent = open.full.length <= FOLD
          ? open.full
          : `${open.full.slice(0, FOLD)} … (${(open.full.length - FOLD).toLocaleString()} more characters)`;
      }
    } else {
      const open = streams.get(s.effect);
      if (open) {
        open.li.remove();
        streams.delete(s.effect);
      }
    }
  }

  // Items are drawn once per frame: a burst of records costs one layout.
  let pending = [];
  function addItems(items) {
    if (!pending.length) requestAnimationFrame(() => {
      const batch = pending;
      pending = [];
      drawItems(batch);
    });
    pending.push(...items);
  }

  function drawItems(items) {
    follow(() => {
      const frag = document.createDocumentFragment();
      for (const item of items) {
        head = Math.max(head, item.seq);
        if (item.stream && item.stream.state === "closed") streamed(item, frag);
        if (item.lines.length || !item.stream) {
          const node = itemNode(item);
          if (!item.lines.length) node.classList.add("silent");
          frag.append(node);
          const waiting = awaited.get(item.id);
          if (waiting) {
            waiting(node);
            awaited.delete(item.id);
          }
        }
        if (item.stream && item.stream.state !== "closed") streamed(item, frag);
      }
      // Streams still open stay last, below the records that came after them.
      lines.append(frag);
      for (const { li } of streams.values()) lines.append(li);
    });
    main.dataset.head = String(head);
    const slider = document.getElementById("slider");
    const field = document.getElementById("seq");
    slider.max = String(head);
    field.max = String(head);
    document.getElementById("seq-head").textContent = `of ${head}`;
  }

  function keyFor(what) {
    if (!keys.has(what)) keys.set(what, `console/${what}/${Date.now().toString(36)}${Math.random().toString(36).slice(2)}`);
    return keys.get(what);
  }

  // What each action came to, kept after its box is gone: sent, then the
  // record it made once that record is on the page.
  function outcome(label) {
    const list = document.getElementById("outcomes");
    const text = el("span", { text: `${label}: sending…` });
    const li = el("li", {}, text);
    list.append(li);
    list.hidden = false;
    return { li, text };
  }

  function landedAt(entry, label, li) {
    li.classList.add("landed");
    entry.li.classList.add("done");
    entry.text.textContent = `${label}: done, record ${li.dataset.seq} (${li.dataset.tag}) `;
    entry.li.append(el("button", { type: "button", text: "show", onclick: () => showRecord(Number(li.dataset.seq)) }));
  }

  async function act(path, body, status, what, label) {
    const entry = outcome(label);
    status.textContent = "sending…";
    status.classList.remove("problem");
    const controls = status.parentElement.querySelectorAll("button, input, textarea, select");
    for (const c of controls) c.disabled = true;
    const { status: code, body: answer } = await postJSON(path, { ...body, key: keyFor(what) });
    if (code === 200) {
      status.textContent = "applied";
      entry.text.textContent = `${label}: applied, waiting for its record`;
      const li = lines.querySelector(`li[data-id="${CSS.escape(answer.record || "")}"]`);
      if (li) landedAt(entry, label, li);
      else if (answer.record) awaited.set(answer.record, (node) => landedAt(entry, label, node));
    } else if (code === 202) {
      status.textContent = answer.message;
      entry.text.textContent = `${label}: ${answer.message}`;
    } else {
      const why = answer.error || `refused (${code})`;
      status.textContent = why;
      status.classList.add("problem");
      entry.text.textContent = `${label}: ${why}`;
      entry.li.classList.add("problem");
      // Refused: the next try is a new command, under a new key.
      keys.delete(what);
      for (const c of controls) c.disabled = false;
    }
  }

  function reviewsNode(reviews) {
    // The classifiers that looked at this call first, in the replay's words.
    return el("ul", { class: "reviews" }, ...reviews.map((r) =>
      el("li", { class: `review ${r.verdict}`, "data-classifier": r.classifier },
        el("span", { class: "k-gate", text: `classifier ${r.classifier}: ${r.verdict}` }),
        r.failed ? " (failed, so ask)" : "",
        r.reason ? `: ${r.reason}` : "")));
  }

  // A form gate: plain inputs for the schema's plain fields, a JSON box for
  // anything else.  Values go as typed as they can be read; what does not
  // fit (a word in a number field) goes as typed, for the owner to refuse
  // with the field named.
  function fieldNode(f) {
    const id = `f-${Math.random().toString(36).slice(2)}`;
    const label = el("label", { for: id }, el("span", { class: "name", text: f.title || f.name }));
    if (f.required) label.append(el("span", { class: "required", title: "required", text: " *" }));
    let input;
    if (f.type === "boolean") {
      input = el("input", { id, type: "checkbox", name: f.name, checked: f.default === true });
    } else if (f.type === "enum") {
      input = el("select", { id, name: f.name },
        ...(f.required ? [] : [el("option", { value: "", text: "" })]),
        ...f.enum.map((v, i) => el("option", { value: String(i), text: String(v), selected: f.has_default && f.default === v })));
    } else if (f.type === "json") {
      input = el("textarea", { id, name: f.name, rows: 2, placeholder: "JSON", class: "json" });
      if (f.has_default) input.value = JSON.stringify(f.default);
    } else {
      const numeric = f.type === "integer" || f.type === "number";
      input = el("input", { id, type: "text", name: f.name, inputmode: numeric ? (f.type === "integer" ? "numeric" : "decimal") : null, required: f.required });
      if (f.has_default && f.default !== null) input.value = String(f.default);
    }
    const row = el("div", { class: "field", "data-field": f.name, "data-type": f.type }, label, input);
    if (f.description) row.append(el("p", { class: "description", text: f.description }));
    return { row, read: () => readField(f, input) };
  }

  // [present, value]: an empty optional field is left out (its default applies).
  function readField(f, input) {
    if (f.type === "boolean") return [true, input.checked];
    if (f.type === "enum") return input.value === "" ? [false] : [true, f.enum[Number(input.value)]];
    const text = input.value;
    if (text.trim() === "") return f.required && f.type === "string" ? [true, ""] : [false];
    if (f.type === "json") {
      try {
        return [true, JSON.parse(text)];
      } catch (err) {
        throw new Error(`${f.name} is not JSON (${err.message})`);
      }
    }
    if (f.type === "integer" && /^-?\d+$/.test(text.trim())) return [true, Number(text.trim())];
    if (f.type === "number" && text.trim() !== "" && !Number.isNaN(Number(text))) return [true, Number(text)];
    return [true, text];
  }

  function formNode(g, path, status) {
    const form = el("form", { class: "schema-form", "data-gate-form": g.gate_id });
    if (g.form_title) form.append(el("h4", { class: "form-title", text: g.form_title }));
    if (g.form_description) form.append(el("p", { class: "description form-description", text: g.form_description }));
    let read;
    if (g.fields) {
      const fields = g.fields.map(fieldNode);
      for (const f of fields) form.append(f.row);
      read = () => {
        const data = {};
        g.fields.forEach((f, i) => {
          const [present, value] = fields[i].read();
          if (present) data[f.name] = value;
        });
        return { data };
      };
    } else {
      const box = el("textarea", { "aria-label": "answer (JSON)", rows: 4, class: "json", placeholder: JSON.stringify(g.form) });
      form.append(box);
      read = () => ({ text: box.value });
    }
    form.append(el("button", { type: "submit", text: "Send" }));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      let body;
      try {
        body = read();
      } catch (err) {
        status.textContent = err.message;
        status.classList.add("problem");
        return;
      }
      act(path, { action: "answer", ...body }, status, g.gate_id, `answered the form (gate ${g.gate_id})`);
    });
    return form;
  }

  function urlNode(g, path, status) {
    const wrap = el("div", { class: "open-url" });
    // Only an http(s) address ever becomes a link (the server says which).
    const shown = g.link && /^https?:\/\//i.test(g.link)
      ? el("a", { href: g.link, target: "_blank", rel: "noopener noreferrer", class: "url", text: g.url })
      : el("code", { class: "url", text: g.url });
    wrap.append(el("p", {}, "Open ", shown, ", then confirm here."));
    if (!READ_ONLY) {
      const value = g.needs_value ? el("input", { type: "text", "aria-label": "value", placeholder: "the value the page gave (a code, an id)", required: true }) : null;
      const form = el("form", { class: "confirm" }, value, el("button", { type: "submit", text: "Confirm" }));
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        act(path, { action: "confirm", value: value ? value.value : null }, status, g.gate_id, `confirmed ${g.url} (gate ${g.gate_id})`);
      });
      wrap.append(form);
    }
    return wrap;
  }

  function gateNode(g) {
    const status = el("p", { class: "outcome", role: "status" });
    const path = `${base}/gates/${encodeURIComponent(g.gate_id)}`;
    const kind = g.form ? "form" : g.url ? "url" : g.kind;
    const box = el("div", { class: `gate ${g.kind} ${kind}`, "data-gate": g.gate_id, "data-kind": kind });
    const what = g.kind === "permission" ? `${g.tool} wants to run` : g.form ? "form" : g.url ? "open a page" : "question";
    box.append(el("h3", { text: `${what} (gate ${g.gate_id}, loop ${g.loop})` }), el("p", { class: "prompt", text: g.prompt }));
    if (g.preview) box.append(el("pre", { class: "preview", text: JSON.stringify(g.preview, null, 2) }));
    if (g.reviews && g.reviews.length) box.append(reviewsNode(g.reviews));
    if (g.url) {
      box.append(urlNode(g, path, status));
    } else if (g.form) {
      if (!READ_ONLY) box.append(formNode(g, path, status));
    } else if (!READ_ONLY) {
      if (g.kind === "permission") {
        const choices = [["allow_once", "Allow once"], ["allow_session", "Allow for the session"], ["deny", "Deny"]];
        box.append(el("div", { class: "buttons" }, ...choices.map(([action, label]) =>
          el("button", { type: "button", class: action, text: label, onclick: () => act(path, { action }, status, g.gate_id, `${label} (${g.tool}, gate ${g.gate_id})`) }))));
      } else if (g.choices && g.choices.length) {
        box.append(el("div", { class: "buttons" }, ...g.choices.map((c) =>
          el("button", { type: "button", text: c, onclick: () => act(path, { action: "answer", text: c }, status, g.gate_id, `answered "${c}" (gate ${g.gate_id})`) }))));
      } else {
        const input = el("input", { type: "text", "aria-label": "answer", placeholder: "your answer" });
        const form = el("form", { class: "answer" }, input, el("button", { type: "submit", text: "Answer" }));
        form.addEventListener("submit", (ev) => {
          ev.preventDefault();
          act(path, { action: "answer", text: input.value }, status, g.gate_id, `answered (gate ${g.gate_id})`);
        });
        box.append(form);
      }
    }
    box.append(status);
    return box;
  }

  function unknownNode(u) {
    const status = el("p", { class: "outcome", role: "status" });
    const path = `${base}/effects/${encodeURIComponent(u.execution_id)}`;
    const box = el("div", { class: "unknown", "data-execution": u.execution_id });
    box.append(
      el("h3", { text: `outcome unknown: ${u.name} (${u.execution_id}, loop ${u.loop})` }),
      el("pre", { class: "preview", text: JSON.stringify(u.input, null, 2) }),
      el("p", { text: "The process running it stopped before its result was written. Say what happened:" })
    );
    if (!READ_ONLY) {
      const result = el("textarea", { "aria-label": "result", rows: 2, placeholder: "the result the model will see" });
      const error = el("input", { type: "checkbox", "aria-label": "is error" });
      const form = el("form", { class: "resolve" }, result, el("label", {}, error, " it failed (is_error)"), el("button", { type: "submit", text: "Resolve" }));
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        act(path, { result: result.value, is_error: error.checked }, status, u.execution_id, `resolved ${u.name} (${u.execution_id})`);
      });
      box.append(form);
    }
    box.append(status);
    return box;
  }

  function pausedNode(p) {
    const status = el("p", { class: "outcome", role: "status" });
    const path = `${base}/loops/${encodeURIComponent(p.loop)}`;
    const box = el("div", { class: "paused", "data-loop": p.loop });
    // The node lives as long as this pause is shown: a retry is the same command, a later pause a new one.
    const what = `resume/${p.loop}/${Math.random().toString(36).slice(2)}`;
    box.append(
      el("h3", { text: `loop ${p.loop} is paused` }),
      el("p", { text: p.turn_open ? "Its turn waits before its next step; answers and input wait too." : "It begins no turn; input and answers wait." })
    );
    if (!READ_ONLY) {
      box.append(el("div", { class: "buttons" },
        el("button", { type: "button", class: "resume", text: "Resume", onclick: () => act(path, { action: "resume" }, status, what, `resumed loop ${p.loop}`) })));
    }
    box.append(status);
    return box;
  }

  function showActions(actions) {
    const section = document.getElementById("actions");
    const gates = document.getElementById("gates");
    const unknown = document.getElementById("unknown");
    // A box still open keeps its node (and what the person typed or sent).
    const reuse = (parent, key, id, make, value) =>
      parent.querySelector(`[${key}="${CSS.escape(id)}"]`) || make(value);
    gates.replaceChildren(...actions.gates.map((g) => reuse(gates, "data-gate", g.gate_id, gateNode, g)));
    unknown.replaceChildren(...actions.unknown.map((u) => reuse(unknown, "data-execution", u.execution_id, unknownNode, u)));
    const paused = document.getElementById("paused");
    const held = actions.paused || [];
    paused.replaceChildren(...held.map((p) => reuse(paused, "data-loop", p.loop, pausedNode, p)));
    section.hidden = !(actions.gates.length || actions.unknown.length || held.length);
  }

  async function showRecord(seq) {
    const aside = document.getElementById("record");
    document.getElementById("record-seq").textContent = String(seq);
    try {
      const record = await getJSON(`${base}/records/${seq}`);
      document.getElementById("record-json").replaceChildren(folded(JSON.stringify(record, null, 2), {}));
    } catch (err) {
      document.getElementById("record-json").textContent = String(err.message);
    }
    aside.hidden = false;
  }
  document.getElementById("record-close").addEventListener("click", () => {
    document.getElementById("record").hidden = true;
  });

  // -- the tree --
  function treeNode(label, children, open) {
    const d = el("details", open ? { open: true } : {});
    d.append(el("summary", { text: label }));
    for (const c of children) d.append(c);
    return d;
  }
  function stepNode(step) {
    if (step.kind === "model") {
      const bits = [step.text ? step.text : "", step.tool_use_ids.length ? `→ ${step.tool_use_ids.length} tool call(s)` : "", step.notice ? `[${step.notice}]` : "", step.failed ? `failed ${step.failed}` : ""].filter(Boolean).join(" ");
      return el("div", { class: "leaf", text: `model step ${step.index}: ${bits} (seq ${step.first_seq}-${step.last_seq})` });
    }
    const gates = step.gates.map((g) => el("div", { class: "leaf k-gate", text: `gate ${g.kind}: ${g.prompt} → ${g.status === "resolved" ? (g.kind === "user_input" ? g.answer : g.allow ? "allowed" : "denied") : g.status}${g.answered_by ? ` by ${g.answered_by}` : ""}` }));
    return treeNode(`tool ${step.name} ${JSON.stringify(step.input)} [${step.status}]${step.result ? " → " + step.result : ""}`, gates, false);
  }
  async function loadTree() {
    const body = document.getElementById("tree-body");
    try {
      const tree = await getJSON(`${base}/tree`);
      // The unified model's `starts`: which call began a child's stream (never containment).
      const startedBy = {};
      for (const r of tree.relations) if (r.kind === "starts" && r.target.startsWith("stream:")) (startedBy[r.target] ||= []).push(r.source);
      const started = (s) => (startedBy[s.id] ? `; started by ${startedBy[s.id].join(", ")}` : "");
      body.replaceChildren(
        ...tree.streams.map((s) =>
          treeNode(`stream ${s.loop} (${s.definition}, ${s.model}) — ${s.status}${started(s)}`, s.epochs.map((ep) =>
            treeNode(`epoch ${ep.index} (seq ${ep.first_seq}-${ep.last_seq})`, ep.talks.map((t) =>
              treeNode(`talk ${t.index} (${t.opened_by}, seq ${t.first_seq})`, t.runs.map((r) =>
                treeNode(`run turn ${r.turn}: ${r.outcome || "open"}${r.code ? " (" + r.code + ")" : ""} seq ${r.first_seq}-${r.last_seq}`, r.steps.map(stepNode), true)), true)), true)), true)),
        el("p", { class: "relations", text: `${tree.relations.length} relations; head seq ${tree.head}` })
      );
    } catch (err) {
      body.replaceChildren(el("p", { class: "problem", text: err.message }));
    }
  }

  // -- time travel --
  const slider = document.getElementById("slider");
  const field = document.getElementById("seq");
  let asked = 0;
  async function travel(seq) {
    const mine = ++asked;
    slider.value = String(seq);
    field.value = String(seq);
    const out = document.getElementById("states");
    try {
      const states = await getJSON(`${base}/states?seq=${encodeURIComponent(seq)}`);
      if (mine === asked) {
        out.replaceChildren(folded(states.text, {}));
        out.dataset.seq = String(states.seq);
        out.classList.remove("problem");
      }
    } catch (err) {
      if (mine === asked) {
        out.textContent = err.message;
        out.classList.add("problem");
      }
    }
  }
  slider.addEventListener("input", () => travel(slider.value));
  document.getElementById("travel-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    travel(field.value);
  });
  field.addEventListener("change", () => travel(field.value));

  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", () => {
      for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("on", b === button);
      for (const t of document.querySelectorAll(".tab")) t.classList.toggle("on", t.id === button.dataset.tab);
      if (button.dataset.tab === "tree") loadTree();
      if (button.dataset.tab === "travel" && !document.getElementById("states").textContent) travel(head || 1);
    });
  }

  whileVisible(() => {
    // From the last record shown: a page shown again gets only what it missed.
    const source = new EventSource(`${base}/events?after=${head}`);
    source.addEventListener("items", (ev) => addItems(JSON.parse(ev.data)));
    source.addEventListener("actions", (ev) => showActions(JSON.parse(ev.data)));
    source.addEventListener("ready", () => {
      live.textContent = "live";
      live.classList.add("on");
      main.dataset.ready = "true";
      showProblem("");
    });
    source.addEventListener("problem", (ev) => {
      showProblem(JSON.parse(ev.data).message);
      source.close();
    });
    source.onerror = () => {
      live.textContent = "reconnecting…";
      live.classList.remove("on");
    };
    return source;
  });
}

if (document.body.dataset.page === "list") listPage();
if (document.body.dataset.page === "session") sessionPage();
