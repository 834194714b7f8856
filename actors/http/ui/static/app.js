// agentlog's viewer: draws the view the path names from the HTTP API (/log/...), the same
// routes any client calls. Everything read from the log is set as text (textContent through
// `el`), never as HTML; control characters are shown as escapes, so a terminal escape or a
// tag in a message is inert.
"use strict";

const LOG = "/log";
const PAGE = 20; // threads a page
const RECORDS = 500; // records a timeline page
const main = document.getElementById("main");
main.replaceChildren = ((set) => function (...nodes) { set.apply(this, nodes.filter((n) => n !== null && n !== undefined)); })(main.replaceChildren);
const tokenInput = document.getElementById("token");

// ---- text and elements ----------------------------------------------------------------------

// The text with every control, bidi and invisible format character but newline and tab
// shown as an escape, so stored text can neither reorder nor hide what is around it.
function visible(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 1);
  return String(text).replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/g,
    (c) => { const n = c.charCodeAt(0); return n < 0x100 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u" + n.toString(16).padStart(4, "0"); });
}

// A word from the log used as a CSS class only when it is one the page styles.
const KNOWN = new Set(["completed", "failed", "abandoned", "rejected", "timed_out", "answered_by_client",
  "running", "pending", "interrupted", "user", "assistant", "system", "tool"]);
function known(word) { return KNOWN.has(word) ? word : "other"; }

// An element: attributes set one by one, children appended (strings as text nodes).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) { // an action's failure is said, not thrown away
      node.addEventListener(name.slice(2), async (ev) => {
        try { await value(ev); } catch (e) { say(e.message); }
      });
    }
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(String(child))));
  }
  return node;
}

function say(text) { document.getElementById("say").textContent = visible(text); }
function when(epoch) { return epoch ? new Date(epoch * 1000).toISOString().replace("T", " ").slice(0, 19) : ""; }
function enc(id) { return encodeURIComponent(id); }
function threadUrl(id) { return "/ui/threads/" + enc(id); }

// ---- the API ------------------------------------------------------------------------------

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const token = sessionStorage.getItem("agentlog-token");
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

async function api(method, path, body) {
  const answer = await fetch(path, {
    method, headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await answer.json().catch(() => null);
  if (!answer.ok) {
    const error = (data && data.error) || { code: String(answer.status), message: answer.statusText };
    throw new Error(error.code + ": " + error.message);
  }
  return data;
}

// A thread's records as they commit (Server-Sent Events read with fetch, so a token goes in
// a header); after a dropped connection it goes on after the last position it was sent.
function follow(threadId, after, onRecord) {
  const stop = new AbortController();
  let last = after;
  (async () => {
    while (!stop.signal.aborted) {
      try {
        const answer = await fetch(LOG + "/threads/" + enc(threadId) + "/stream?after=" + last,
          { headers: headers(false), signal: stop.signal });
        if (!answer.ok) return;
        const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
            if (!data) continue;
            const record = JSON.parse(data);
            last = record.position;
            onRecord(record);
          }
        }
      } catch (e) {
        if (stop.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, 1000)); // reconnect after a pause
    }
  })();
  return stop;
}

function badge(state, text) { return el("span", { class: "badge " + state }, text); }

// A badge may show a check of the same head made in the last minute (the server keeps it;
// its title says when); the Verify button always recomputes.
const BADGE_AGE = 60;

async function verifyBadge(threadId) {
  const span = badge("wait", "checking");
  api("GET", LOG + "/threads/" + enc(threadId) + "/verify?max_age=" + BADGE_AGE).then((report) => {
    span.className = "badge " + (report.ok ? "ok" : "bad");
    span.textContent = report.ok ? "verified" : "broken at seq " + report.first_bad_seq;
    span.title = (report.ok ? report.records_checked + " records checked" : visible(report.problem || ""))
      + " at " + when(report.checked_at);
  }, (e) => { span.className = "badge bad"; span.textContent = "unverified"; span.title = visible(e.message); });
  return span;
}

// A button that runs the thread's verify and says the first broken link, if any.
function verifyButton(threadId) {
  return el("button", { type: "button", onclick: async () => {
    try {
      const report = await api("GET", LOG + "/threads/" + enc(threadId) + "/verify");
      say(report.ok ? `verified: ${report.records_checked} records, chain intact`
        : `broken at seq ${report.first_bad_seq}: ${report.problem}`);
    } catch (e) { say(e.message); }
  } }, "Verify");
}

// ---- threads --------------------------------------------------------------------------------

async function threadsView() {
  const params = new URLSearchParams(location.search);
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const status = params.get("status") || "";
  const graph = params.get("graph") || "";
  const search = { limit: PAGE, offset, values: false };
  if (status) search.status = status;
  if (graph) search.graph_id = graph;
  const rows = await api("POST", LOG + "/threads/search", search);
  const body = el("tbody");
  for (const t of rows) {
    body.append(el("tr", { "data-thread": t.thread_id },
      el("td", {}, el("a", { href: threadUrl(t.thread_id) }, t.thread_id)),
      el("td", {}, t.error ? el("span", { class: "error" }, t.error.code) : t.status),
      el("td", {}, t.graph_id || ""),
      el("td", {}, t.step === undefined ? "" : String(t.step)),
      el("td", {}, when(t.updated_at)),
      el("td", {}, await verifyBadge(t.thread_id))));
  }
  const link = (to, text) => {
    const q = new URLSearchParams(params); q.set("offset", String(to));
    return el("a", { href: "/ui?" + q.toString() }, text);
  };
  setTimeout(function refresh() { // live: each listed thread's status, steps and activity
    if (!body.isConnected) return;
    api("POST", LOG + "/threads/search", search).then((now) => {
      for (const t of now) {
        const row = Array.from(body.rows).find((r) => r.dataset.thread === t.thread_id);
        if (!row || t.error) continue;
        row.cells[1].textContent = visible(t.status);
        row.cells[3].textContent = String(t.step);
        row.cells[4].textContent = when(t.updated_at);
      }
    }, () => {}).finally(() => setTimeout(refresh, 3000));
  }, 3000);
  main.replaceChildren(
    el("h1", {}, "Threads"),
    el("form", { class: "inline", method: "get", action: "/ui", role: "search" },
      el("label", {}, "Graph ", el("input", { name: "graph", value: graph })),
      el("label", {}, "Status ", el("select", { name: "status" },
        ["", "running", "interrupted_before", "interrupted_after", "completed", "failed", "cancelled"]
          .map((s) => el("option", { value: s, selected: s === status }, s || "any")))),
      el("button", { type: "submit" }, "Search")),
    el("table", { "aria-label": "Threads" },
      el("thead", {}, el("tr", {}, ["Thread", "Status", "Graph", "Steps", "Last activity", "Verify"].map((h) => el("th", { scope: "col" }, h)))),
      body),
    rows.length ? null : el("p", {}, "No threads."),
    el("div", { class: "pager" },
      offset > 0 ? link(Math.max(0, offset - PAGE), "← Newer") : null,
      el("span", {}, `${offset + 1}–${offset + rows.length}`),
      rows.length === PAGE ? link(offset + PAGE, "Older →") : null));
}

// ---- a thread's timeline --------------------------------------------------------------------

// Rows from records: one per step (the records up to its step_advanced), one per event
// between steps (a pause, a resume, an edit, a cancel, a fork), a header per run.
function timelineRows(records) {
  const rows = [];
  let step = { tools: [], tokens: 0, edits: [] };
  let runs = 0;
  for (const r of records) {
    const e = r.event;
    switch (r.kind) {
      case "run_started":
        runs += 1;
        rows.push({ run: r.run_id || "run " + runs, actor: r.actor, at: r.at });
        break;
      case "tool_call_started":
        step.tools.push({ id: e.call_id, name: e.name, status: "started" });
        break;
      case "tool_call_finished": {
        const call = step.tools.find((c) => c.id === e.call_id);
        if (call) call.status = e.status; else step.tools.push({ id: e.call_id, name: e.name, status: e.status });
        break;
      }
      case "model_called":
        for (const v of Object.values(e.usage || {})) if (typeof v === "number") step.tokens += v;
        break;
      case "node_entered":
        step.entered = true;
        break;
      case "message_appended": case "messages_replaced": case "messages_removed":
        if (e.reason) step.why = e.reason;
        break;
      case "step_advanced":
        rows.push({ step: e.step, node: step.entered ? r.actor : `edit by ${r.actor}` + (step.why ? ` — why: ${step.why}` : ""),
          duration: e.duration_ms, tools: step.tools, tokens: step.tokens, at: r.at, seq: r.seq });
        step = { tools: [], tokens: 0 };
        break;
      case "interrupt_raised":
        rows.push({ event: "interrupt", text: `paused ${e.when} ${e.node}: ${e.reason}`, actor: r.actor, at: r.at });
        break;
      case "resumed":
        rows.push({ event: "resumed", text: `resumed at ${e.node || ""}`, actor: e.by || r.actor, at: r.at });
        break;
      case "state_updated":
        if (e.source !== "node") rows.push({ event: "edit", text: `edited ${Object.keys(e.values).join(", ")}` + (e.reason ? ` — why: ${e.reason}` : ""), actor: r.actor, at: r.at });
        break;
      case "run_cancelled":
        rows.push({ event: "cancel", text: "cancelled" + (e.reason ? ` — why: ${e.reason}` : ""), actor: e.by, at: r.at });
        break;
      case "forked":
        rows.push({ event: "fork", text: `forked from ${e.source_thread} at seq ${e.source_seq}`, actor: r.actor, at: r.at, from: e.source_thread });
        break;
      case "run_completed": case "run_failed": case "stopped":
        rows.push({ event: r.kind.replace("_", " "), text: e.message || (e.duration_ms ? `${e.duration_ms.toFixed(1)} ms` : ""), actor: r.actor, at: r.at });
        break;
      default:
    }
  }
  return rows;
}

async function timelineView(threadId) {
  const params = new URLSearchParams(location.search);
  const after = Math.max(0, parseInt(params.get("after") || "0", 10) || 0);
  const base = LOG + "/threads/" + enc(threadId);
  // the thread without its values (a long thread's state is large), unless it is paused
  // and the pending tool calls are wanted
  const head = () => api("GET", base + "?values=false").then((t) => t.interrupts.length ? api("GET", base) : t);
  const [thread, page] = await Promise.all([
    head(), api("GET", `${base}/records?after=${after}&limit=${RECORDS}`)]);
  let records = page.records;
  const header = el("div");
  const table = el("table", { "aria-label": "Timeline" });
  const actions = el("div", { class: "actions" });
  let selected = -1;

  function drawHeader(t) {
    header.replaceChildren(
      el("h1", {}, "Thread ", el("code", {}, threadId)),
      el("p", {}, `graph ${t.graph_id} · status `, el("strong", { id: "status" }, t.status),
        ` · step ${t.step} · last activity ${when(t.updated_at)} · `));
    verifyBadge(threadId).then((b) => header.querySelector("p").append(b));
    drawActions(t);
  }

  function drawActions(t) {
    actions.replaceChildren();
    actions.append(verifyButton(threadId));
    if (t.interrupts && t.interrupts.length) {
      const pause = t.interrupts[0];
      const calls = pendingCalls(t);
      actions.append(el("span", { class: "pending" }, `pending: ${pause.node || ""} ${pause.reason || ""}`,
        calls.map((c) => ` · ${c.name}(${JSON.stringify(c.args)})`)),
        el("button", { type: "button", class: "primary", onclick: () => resume(t) }, "Approve and resume"));
      if (calls.length) {
        const why = el("input", { name: "why", size: 24 });
        actions.append(el("label", {}, "Why ", why),
          el("button", { type: "button", onclick: () => reject(t, pause.node, calls, why.value) }, "Reject"));
      }
    }
    if (t.status === "running") {
      actions.append(el("button", { type: "button", onclick: () => cancel() }, "Cancel run"));
    }
    const compare = el("form", { class: "inline", method: "get", action: threadUrl(threadId) + "/diff" },
      el("label", {}, "Diff step ", el("input", { name: "a", type: "number", min: 0, size: 4, value: 1 })),
      el("label", {}, "with ", el("input", { name: "b", type: "number", min: 0, size: 4, value: t.step })),
      el("button", { type: "submit" }, "Diff"));
    actions.append(compare);
  }

  async function resume(t) {
    const assistants = await api("POST", "/assistants/search", { graph_id: t.graph_id, limit: 1 });
    if (!assistants.length) { say("no assistant serves graph " + t.graph_id); return; }
    await api("POST", base + "/runs", { assistant_id: assistants[0].assistant_id, command: { resume: null } });
    say("resumed");
  }

  // The tool calls of the last message that no result answers yet.
  function pendingCalls(t) {
    const messages = (t.values && t.values.context) || [];
    const answered = new Set();
    for (const m of messages) for (const b of m.content || []) if (b.type === "tool_result") answered.add(b.call_id);
    const last = [...messages].reverse().find((m) => m.role === "assistant");
    return ((last && last.content) || []).filter((b) => b.type === "tool_call" && !answered.has(b.id));
  }

  // A rejection: each pending call answered with an error, as the paused node (an edit the
  // log records with the token's name), then the run goes on from there.
  async function reject(t, node, calls, why) {
    const messages = calls.map((c) => ({ type: "tool", tool_call_id: c.id, status: "error",
      content: "rejected" + (why ? ": " + why : "") }));
    await api("POST", "/threads/" + enc(threadId) + "/state", { values: { messages }, as_node: node });
    await resume(t);
  }

  async function cancel() {
    const runs = await api("GET", base + "/runs?limit=10");
    const live = runs.find((r) => r.status === "running" || r.status === "pending");
    if (live) { await api("POST", `${base}/runs/${enc(live.run_id)}/cancel`); say("cancelled " + live.run_id); }
  }

  async function fork(step) {
    const made = await api("POST", base + "/copy", { step });
    location.assign(threadUrl(made.thread_id));
  }

  function draw() {
    const rows = timelineRows(records);
    const durations = rows.filter((r) => r.duration !== undefined && r.duration !== null).map((r) => r.duration).sort((a, b) => b - a);
    const slow = durations.length > 3 ? durations[2] : Infinity;
    const body = el("tbody");
    for (const r of rows) {
      if (r.run !== undefined) {
        body.append(el("tr", { class: "run" }, el("th", { colspan: 7, scope: "rowgroup" }, `${r.run} · started by ${r.actor} · ${when(r.at)}`)));
      } else if (r.step !== undefined) {
        const tools = r.tools.map((c) => el("span", { class: "tool " + known(c.status) }, `${c.name} (${c.status}) `));
        const row = el("tr", { class: "step", tabindex: 0, "data-step": r.step },
          el("td", {}, String(r.step)),
          el("td", {}, r.node),
          el("td", { class: r.duration >= slow ? "slow" : null }, r.duration === null || r.duration === undefined ? "" : `${r.duration.toFixed(1)} ms`, r.duration >= slow ? " slowest" : ""),
          el("td", {}, r.tokens ? String(r.tokens) : ""),
          el("td", {}, tools),
          el("td", {}, when(r.at)),
          el("td", {}, el("a", { href: `${threadUrl(threadId)}/state/${r.step}` }, "state"), " ",
            el("button", { type: "button", onclick: () => fork(r.step) }, "Fork here")));
        body.append(row);
      } else {
        body.append(el("tr", { class: "event" }, el("td", {}, ""), el("td", {}, r.event),
          el("td", { colspan: 3 }, r.text, r.from ? [" ", el("a", { href: `${threadUrl(r.from)}/diff?with=${enc(threadId)}` }, "diff with it")] : null),
          el("td", {}, when(r.at)), el("td", {}, r.actor ? "by " + r.actor : "")));
      }
    }
    table.replaceChildren(
      el("thead", {}, el("tr", {}, ["Step", "Node", "Duration", "Tokens", "Tool calls", "At", ""].map((h) => el("th", { scope: "col" }, h)))),
      body);
    select(selected);
  }

  function select(i) {
    const rows = table.querySelectorAll("tr.step");
    if (!rows.length) return;
    rows.forEach((r) => r.classList.remove("selected"));
    if (i < 0) return;
    selected = Math.min(Math.max(i, 0), rows.length - 1);
    const row = rows[selected];
    row.classList.add("selected");
    row.focus();
    say(`step ${row.dataset.step} selected`);
  }

  table.addEventListener("keydown", (ev) => {
    const rows = Array.from(table.querySelectorAll("tr.step"));
    const at = rows.indexOf(document.activeElement);
    if (ev.key === "ArrowDown" || ev.key === "j") { select(at + 1); ev.preventDefault(); }
    else if (ev.key === "ArrowUp" || ev.key === "k") { select(Math.max(at - 1, 0)); ev.preventDefault(); }
    else if (ev.key === "Enter" && at >= 0) location.assign(`${threadUrl(threadId)}/state/${rows[at].dataset.step}`);
  });
  table.addEventListener("focusin", (ev) => {
    const rows = Array.from(table.querySelectorAll("tr.step"));
    const at = rows.indexOf(ev.target);
    if (at >= 0 && at !== selected) select(at);
  });

  const last = records.length ? records[records.length - 1].seq : after;
  const pager = el("div", { class: "pager" },
    after > 0 ? el("a", { href: `${threadUrl(threadId)}?after=${Math.max(0, after - RECORDS)}` }, "← Earlier") : null,
    el("span", {}, `records ${after + 1}–${last} of ${page.head}`),
    last < page.head ? el("a", { href: `${threadUrl(threadId)}?after=${last}` }, "Later →") : null,
    page.head > RECORDS ? el("a", { href: `${threadUrl(threadId)}?after=${Math.max(0, page.head - RECORDS)}` }, "Latest") : null);
  drawHeader(thread);
  draw();
  main.replaceChildren(header, actions, pager, table);
  if (last >= page.head) { // the newest page: live while runs go on
    const position = records.length ? records[records.length - 1].position : 0;
    let refresh = null;
    follow(threadId, position, (record) => {
      if (record.seq <= last) return;
      records.push(record);
      draw();
      clearTimeout(refresh);
      refresh = setTimeout(() => head().then(drawHeader, () => {}), 100);
    });
  }
}

// ---- state at a step ------------------------------------------------------------------------

function tree(value) {
  if (value === null || typeof value !== "object") return el("code", {}, JSON.stringify(value) ?? "null");
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  if (!entries.length) return el("code", {}, Array.isArray(value) ? "[]" : "{}");
  return el("ul", {}, entries.map(([k, v]) => el("li", {}, el("span", { class: "key" }, k), ": ", tree(v))));
}

function transcript(messages) {
  const results = new Map();
  for (const m of messages) for (const b of m.content || []) if (b.type === "tool_result") results.set(b.call_id, b);
  const out = el("div", { class: "transcript" });
  for (const m of messages) {
    if (m.role === "tool" && (m.content || []).every((b) => b.type === "tool_result")) continue; // shown with its call
    const box = el("article", { class: "msg " + known(m.role), "aria-label": m.role + " message" }, el("div", { class: "role" }, m.role));
    if (m.reasoning) box.append(el("details", {}, el("summary", {}, "reasoning"), el("div", { class: "text" }, m.reasoning)));
    for (const b of m.content || []) {
      if (b.type === "text") box.append(el("div", { class: "text" }, b.text));
      else if (b.type === "reasoning") box.append(el("details", {}, el("summary", {}, "reasoning"), el("div", { class: "text" }, b.summary || b.text || "")));
      else if (b.type === "tool_call") {
        const result = results.get(b.id);
        box.append(el("div", { class: "call" }, "calls ", el("code", {}, b.name), el("pre", {}, JSON.stringify(b.args, null, 1)),
          result ? el("div", { class: "tool " + known(result.status || "") }, `result (${result.status || (result.is_error ? "error" : "ok")})`, el("pre", {}, JSON.stringify(result.output, null, 1)))
            : el("div", {}, "no result yet")));
      } else if (b.type === "tool_result") box.append(el("pre", {}, JSON.stringify(b.output, null, 1)));
      else box.append(el("div", { class: "media" }, `[${b.type}] `, b.url || b.file_id || b.id || ""));
    }
    out.append(box);
  }
  return out;
}

async function stateView(threadId, step) {
  const state = await api("GET", `${LOG}/threads/${enc(threadId)}/state/${step}`);
  const values = state.values || {};
  const custom = Object.fromEntries(Object.entries(values).filter(([k]) => k !== "context"));
  const nav = el("div", { class: "pager" },
    step > 0 ? el("a", { href: `${threadUrl(threadId)}/state/${step - 1}` }, "← Step " + (step - 1)) : null,
    el("a", { href: threadUrl(threadId) }, "Timeline"),
    el("a", { href: `${threadUrl(threadId)}/state/${step + 1}` }, "Step " + (step + 1) + " →"));
  main.replaceChildren(
    el("h1", {}, `State at step ${step}`),
    el("p", {}, "thread ", el("a", { href: threadUrl(threadId) }, threadId), ` · status ${state.status} · next ${(state.next || []).join(", ")}`),
    nav,
    el("h2", {}, "Messages"),
    state.values_error ? el("p", { class: "error" }, state.values_error) : transcript(values.context || []),
    el("h2", {}, "Fields"),
    el("div", { class: "tree" }, tree(custom)));
}

// ---- diff -----------------------------------------------------------------------------------

function changes(a, b, path, out) {
  if (JSON.stringify(a) === JSON.stringify(b)) return out;
  const objects = a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b);
  if (!objects) { out.push({ path: path || "(root)", before: a, after: b }); return out; }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) changes(a[k], b[k], path ? `${path}.${k}` : k, out);
  return out;
}

// Two steps of a thread, or (`with`) a step of the thread and one of another, such as its
// fork; a step left out is the thread as it is now.
async function diffView(threadId) {
  const params = new URLSearchParams(location.search);
  const other = params.get("with") || threadId;
  const step = (name) => params.has(name) ? parseInt(params.get(name), 10) || 0 : null;
  const a = step("a"), b = step("b");
  const state = (id, at) => api("GET", `${LOG}/threads/${enc(id)}/state` + (at === null ? "" : "/" + at));
  const [sa, sb] = await Promise.all([state(threadId, a), state(other, b)]);
  const va = sa.values || {}, vb = sb.values || {};
  const byId = (ms) => new Map((ms || []).map((m) => [m.message_id, m]));
  const ma = byId(va.context), mb = byId(vb.context);
  const added = [...mb.values()].filter((m) => !ma.has(m.message_id));
  const removed = [...ma.values()].filter((m) => !mb.has(m.message_id));
  const strip = (v) => Object.fromEntries(Object.entries(v).filter(([k]) => k !== "context"));
  const fields = changes(strip(va), strip(vb), "", []);
  const show = (v) => v === undefined ? "(absent)" : JSON.stringify(v, null, 1);
  main.replaceChildren(
    el("h1", {}, `Diff of step ${sa.step} and step ${sb.step}`),
    el("p", {}, "thread ", el("a", { href: threadUrl(threadId) }, threadId),
      other !== threadId ? [" with ", el("a", { href: threadUrl(other) }, other)] : null),
    el("h2", {}, `Messages added (${added.length})`), transcript(added),
    el("h2", {}, `Messages removed (${removed.length})`), transcript(removed),
    el("h2", {}, `Fields changed (${fields.length})`),
    el("ul", { class: "changes" }, fields.map((c) => el("li", {}, el("code", {}, c.path), " ",
      el("span", { class: "del" }, show(c.before)), " → ", el("span", { class: "add" }, show(c.after))))));
}

// ---- the route ------------------------------------------------------------------------------

async function route() {
  tokenInput.value = sessionStorage.getItem("agentlog-token") || "";
  tokenInput.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("agentlog-token", tokenInput.value);
    location.reload();
  });
  const parts = location.pathname.replace(/\/+$/, "").split("/").slice(2).map(decodeURIComponent);
  try {
    if (parts.length === 0) { document.title = "Threads · agentlog"; await threadsView(); }
    else if (parts[0] === "threads" && parts.length === 2) { document.title = `${parts[1]} · agentlog`; await timelineView(parts[1]); }
    else if (parts[0] === "threads" && parts[2] === "state") { document.title = `State · ${parts[1]} · agentlog`; await stateView(parts[1], parseInt(parts[3], 10) || 0); }
    else if (parts[0] === "threads" && parts[2] === "diff") { document.title = `Diff · ${parts[1]} · agentlog`; await diffView(parts[1]); }
    else main.replaceChildren(el("h1", {}, "Not found"), el("p", {}, el("a", { href: "/ui" }, "Threads")));
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Cannot show this"), el("p", { class: "error", role: "alert" }, e.message),
      parts[0] === "threads" ? verifyButton(parts[1]) : null);
  }
  document.body.dataset.ready = "1";
}

route();
