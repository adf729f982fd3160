// agent_jobs console: approvals, task timelines, queues, operator controls and releases over the
// JSON API.
//
// Rules this file keeps (tests/browser and tests/integration/test_console_api.py check them):
// - every value that came from a customer, a business system or the model is put on the page
//   with textContent or a DOM attribute, never parsed as HTML (no HTML-parsing sink anywhere);
// - the session is the bearer token, in this tab's sessionStorage, sent as an Authorization
//   header; no cookie exists, so a cross-site request carries no credential;
// - the page never decides: a grant or a denial is the server's answer, shown as it is;
// - a page shows only what its person asked for: sign-out forgets everything (the page, the
//   tab's storage, the address), a route change forgets what the page it left showed, and an
//   answer to a request made before either is dropped unread (a tab is shared by people).
"use strict";

(function () {
  const TOKEN_KEY = "agent_jobs.console.token";
  const POLL_MS = { approvals: 3000, queues: 5000, timeline: 3000, releases: 5000 };
  const STATUSES = [
    "RECEIVED", "RUNNING", "RETRY_WAIT", "APPROVAL_WAIT", "EXECUTING", "EXEC_UNKNOWN",
    "VERIFYING", "COMPLETED", "ESCALATED", "FAILED", "CANCELLED",
  ];
  const TERMINAL = new Set(["COMPLETED", "ESCALATED", "FAILED", "CANCELLED"]);
  const ID_RE = /^[A-Za-z0-9_-]{1,80}$/;
  const RELEASE_ID_RE = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

  const PAGES = ["approvals", "timeline", "queues", "releases"];

  let me = null;
  let page = null; // the page shown now (null when signed out)
  // Bumped at sign-in, sign-out and every route change: an answer to a request made in an
  // earlier era is for a person or a page no longer shown, and is dropped.
  let era = 0;
  const reads = new Set(); // AbortControllers of the reads in flight
  let timer = null;
  let clockTimer = null;
  let serverSkewMs = 0; // server clock minus this browser's clock, from the last approvals read
  const cards = new Map(); // approval id -> card state

  // -- DOM helpers: text only ------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  // el("td", {class: "x"}, "text", otherNode): strings become text nodes, never markup.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "style") for (const [p, val] of Object.entries(v)) node.style.setProperty(p, val);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function show(node, on) { node.hidden = !on; }

  function say(text) { $("status").textContent = text || ""; }

  function fmtMs(ms) {
    const v = Number(ms) || 0;
    if (v >= 60000) return (v / 60000).toFixed(1) + " min";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    return v.toFixed(v < 10 ? 1 : 0) + " ms";
  }

  function fmtLeft(seconds) {
    if (seconds <= 0) return "expired";
    const m = Math.floor(seconds / 60);
    const s = Math.floor(seconds % 60);
    return (m ? m + " min " : "") + s + " s left";
  }

  function fmtTime(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    return isNaN(d) ? String(iso) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function json(value) { return JSON.stringify(value); }

  // -- the API ---------------------------------------------------------------------------------

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  // A promise that never settles: what a caller awaiting a dropped answer gets, so none of its
  // code after the await runs (and nothing of the answer reaches the page).
  function dropped() { return new Promise(() => {}); }

  // A new era: reads in flight are aborted (a write is not: it may already have been applied,
  // and the server's record of it stands), and every answer still to come is dropped.
  function newEra() {
    era += 1;
    for (const c of reads) c.abort();
    reads.clear();
  }

  async function api(method, path, body) {
    const mine = era;
    const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
    const init = { method, headers, credentials: "omit", cache: "no-store", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const reader = method === "GET" ? new AbortController() : null;
    if (reader) { init.signal = reader.signal; reads.add(reader); }
    let res;
    let data = null;
    try {
      try {
        res = await fetch(path, init);
      } catch (err) {
        if (mine !== era) return dropped();
        return { ok: false, status: 0, error: { code: "network", message: "the API did not answer" } };
      }
      try { data = await res.json(); } catch (err) { data = null; }
    } finally {
      if (reader) reads.delete(reader);
    }
    if (mine !== era) return dropped();
    if (res.status === 401 && me !== null) signOut("Your token was refused (expired or invalid): sign in again.");
    if (!res.ok) {
      const error = (data && data.error) || { code: "http_" + res.status, message: res.statusText };
      return { ok: false, status: res.status, error };
    }
    return { ok: true, status: res.status, data };
  }

  function errorText(result) {
    return result.error.message + " (" + result.status + " " + result.error.code + ")";
  }

  // -- session ---------------------------------------------------------------------------------

  async function signIn(raw) {
    newEra();
    forgetAll();
    sessionStorage.setItem(TOKEN_KEY, raw.trim());
    const result = await api("GET", "/v1/console/me");
    if (!result.ok) {
      sessionStorage.removeItem(TOKEN_KEY);
      $("login-error").textContent = "Sign-in refused: " + errorText(result);
      return false;
    }
    me = result.data;
    $("login-error").textContent = "";
    $("token").value = "";
    $("who").textContent = me.subject + " @ " + me.tenant_id + (me.roles.length ? " (" + me.roles.join(", ") + ")" : "");
    show($("login"), false);
    show($("app"), true);
    show($("nav"), true);
    show($("sign-out"), true);
    route();
    return true;
  }

  // Everything a person saw is forgotten: the pages' lists, timeline, counts, messages and
  // inputs, the tab's storage (the token and anything else kept there), the address (a task id
  // in it would open that task for the next person) and every answer still on its way.
  function signOut(message) {
    newEra();
    me = null;
    stopPolling();
    forgetAll();
    sessionStorage.clear();
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    showLogin(message);
  }

  // The sign-in form alone (at load without a token, the address is kept: a link to a task
  // opens it once its person signs in).
  function showLogin(message) {
    show($("app"), false);
    show($("nav"), false);
    show($("sign-out"), false);
    show($("login"), true);
    $("login-error").textContent = message || "";
    $("token").value = "";
  }

  function forgetAll() {
    for (const p of PAGES) forget(p);
    page = null;
    serverSkewMs = 0;
    $("who").textContent = "";
    say("");
  }

  // What page `name` put on the screen, gone: its lists, counts, messages and inputs.
  function forget(name) {
    if (name === "approvals") {
      cards.clear();
      clear($("approvals"));
      $("approvals-count").textContent = "";
      $("approvals-error").textContent = "";
    } else if (name === "timeline") {
      forgetTimeline();
      clear($("results").querySelector("tbody"));
      show($("results"), false);
      $("q").value = "";
      $("status-filter").value = "";
    } else if (name === "queues") {
      // A switch being confirmed is called off (its form would stay locked for the next one).
      if (!$("switch-confirm").hidden) $("switch-confirm-no").click();
      resetOps();
      $("queues-error").textContent = "";
      for (const id of ["switch-target", "switch-value", "switch-reason"]) $(id).value = "";
      $("switch-confirm-text").textContent = "";
    } else if (name === "releases") {
      forgetRelease();
      clear($("releases-table").querySelector("tbody"));
      show($("releases-table"), false);
      show($("no-releases"), false);
      $("releases-error").textContent = "";
    }
  }

  function forgetTimeline() {
    clear($("timeline"));
    $("search-error").textContent = "";
  }

  // -- routing and polling ---------------------------------------------------------------------

  function stopPolling() {
    if (timer !== null) clearInterval(timer);
    if (clockTimer !== null) clearInterval(clockTimer);
    timer = clockTimer = null;
  }

  function poll(fn, ms) {
    stopPolling();
    fn();
    timer = setInterval(fn, ms);
  }

  function route() {
    if (me === null) return;
    const [wanted, arg] = (location.hash.slice(1) || "approvals").split("/");
    const name = PAGES.includes(wanted) ? wanted : "approvals";
    // What the page being left showed goes, and so do the answers it still waits for; within
    // the timeline page, the task shown before (its search box and list stay: they are its own).
    newEra();
    stopPolling();
    if (page !== null && page !== name) forget(page);
    else if (page === "timeline") forgetTimeline();
    else if (page === "releases") forgetRelease();
    page = name;
    for (const p of PAGES) show($("page-" + p), p === name);
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("active", a.dataset.page === name);
    }
    if (name === "approvals") {
      poll(loadApprovals, POLL_MS.approvals);
      clockTimer = setInterval(tickClocks, 1000);
    } else if (name === "queues") {
      show($("ops"), isOperator());
      poll(loadQueues, POLL_MS.queues);
    } else if (name === "releases") {
      poll(loadReleases, POLL_MS.releases);
      if (arg && canReadReleases() && RELEASE_ID_RE.test(decodeURIComponent(arg))) openRelease(decodeURIComponent(arg));
    } else {
      stopPolling();
      if (arg && ID_RE.test(decodeURIComponent(arg))) openTimeline(decodeURIComponent(arg));
    }
  }

  // -- approvals -------------------------------------------------------------------------------

  async function loadApprovals() {
    if (!me.roles.includes("approver")) {
      $("approvals-error").textContent = "Your token does not carry the approver role: approvals are not shown.";
      return;
    }
    const result = await api("GET", "/v1/console/approvals?status=pending&limit=50");
    if (!result.ok) {
      $("approvals-error").textContent = "Could not load approvals: " + errorText(result);
      return;
    }
    $("approvals-error").textContent = "";
    serverSkewMs = new Date(result.data.server_now).getTime() - Date.now();
    const seen = new Set();
    const list = $("approvals");
    for (const a of result.data.approvals) {
      // A plan's approvals are decided together: one card, its head's, shows the whole group.
      if (a.group_id && a.group_id !== a.approval_id) continue;
      seen.add(a.approval_id);
      if (!cards.has(a.approval_id)) {
        const card = approvalCard(a);
        cards.set(a.approval_id, card);
        list.appendChild(card.node);
      }
    }
    for (const [id, card] of cards) {
      if (!seen.has(id) && !card.gone) await noLongerPending(id, card);
    }
    const pending = [...cards.values()].filter((c) => !c.gone).length;
    $("approvals-count").textContent = "(" + pending + ")";
    if (!list.firstChild) list.appendChild(el("p", { class: "empty", id: "no-approvals" }, "Nothing waits for a decision."));
    else if ($("no-approvals") && pending) $("no-approvals").remove();
    tickClocks();
  }

  // A card whose approval left the pending list: say what became of it (decided by whom,
  // expired), and keep it on screen, without buttons, until the approver dismisses it.
  async function noLongerPending(id, card) {
    card.gone = true;
    card.grant.disabled = card.deny.disabled = true;
    const result = await api("GET", "/v1/approvals?task_id=" + encodeURIComponent(card.approval.task_id));
    let text = "No longer pending.";
    if (result.ok) {
      const now = result.data.approvals.find((x) => x.approval_id === id);
      if (now) text = "No longer pending: " + now.status + (now.approver ? " by " + now.approver : "") + ".";
    }
    card.outcome.textContent = text;
    card.outcome.className = "outcome muted";
    card.node.classList.add("gone");
    card.node.appendChild(el("button", { type: "button", class: "dismiss", onclick: () => { card.node.remove(); cards.delete(id); } }, "Dismiss"));
  }

  function tickClocks() {
    const now = Date.now() + serverSkewMs;
    for (const card of cards.values()) {
      if (card.gone) continue;
      const left = (new Date(card.approval.expires_at).getTime() - now) / 1000;
      card.left.textContent = fmtLeft(left);
      card.left.classList.toggle("late", left < 120);
    }
  }

  function kv(rows) {
    return el("dl", { class: "kv" }, rows.filter((r) => r[1] !== null && r[1] !== undefined && r[1] !== "").map(([k, v, cls]) => [
      el("dt", {}, k), el("dd", { class: cls || null }, v),
    ]));
  }

  function pairs(fields) {
    return Object.entries(fields || {}).filter(([, v]) => v !== null && v !== "").map(([k, v]) => k + ": " + v).join(" · ");
  }

  // A declared agent's evidence: every tool result its decisions rest on, with the call that
  // answered it, and its plan of effects (applied, proposed now, refused). All as text nodes.
  function agentEvidenceNode(ag) {
    const parts = [];
    parts.push(el("table", { class: "grid agent-facts" },
      el("thead", {}, el("tr", {}, ["fact", "tool", "asked with", "what the system answered", "source"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ag.facts.map((f) => el("tr", { class: "fact-" + f.kind },
        el("td", {}, f.kind), el("td", {}, el("code", {}, f.tool)), el("td", {}, pairs(f.args)),
        el("td", {}, pairs(f.fields)), el("td", {}, f.source.tool + " (" + f.source.observation + ")"))))));
    if (!ag.facts.length) parts.push(el("p", { class: "muted" }, "No tool results recorded yet."));
    const bound = ag.max_effects ? " (at most " + ag.max_effects + " in this task)" : "";
    parts.push(el("h4", {}, "Plan of effects" + bound));
    parts.push(ag.plan.length ? el("ol", { class: "plan" }, ag.plan.map((p) => el("li", { class: "plan-" + p.status },
      el("span", { class: "plan-status" }, p.status), " ", el("code", {}, p.tool),
      p.idempotency_key ? el("span", { class: "muted" }, " key " + p.idempotency_key) : null,
      pairs(p.args) ? " — " + pairs(p.args) : "", p.detail ? " (" + p.detail + ")" : ""))) :
      el("p", { class: "muted" }, "No effect proposed yet."));
    return el("div", { class: "agent-evidence" }, parts);
  }

  function evidenceNode(a) {
    const ev = a.evidence;
    if (ev.agent) {
      return el("div", { class: "evidence" }, el("h3", {}, "Evidence the policy used"), agentEvidenceNode(ev.agent));
    }
    const parts = [];
    if (ev.facts.length) {
      parts.push(el("table", { class: "grid facts" },
        el("thead", {}, el("tr", {}, el("th", {}, "fact"), el("th", {}, "id"), el("th", {}, "what the system of record says"), el("th", {}, "source"))),
        el("tbody", {}, ev.facts.map((f) => el("tr", { class: f.id === a.payment_id ? "target" : null },
          el("td", {}, f.kind),
          el("td", {}, el("code", {}, f.id)),
          el("td", {}, Object.entries(f.fields).filter(([, v]) => v !== null && v !== "").map(([k, v]) => k + ": " + v).join(" · ")),
          el("td", {}, f.source.tool + " (" + f.source.observation + ")"),
        )))));
    } else {
      parts.push(el("p", { class: "muted" }, "No ledger facts in the checkpoint."));
    }
    if (ev.order) {
      parts.push(el("div", { class: "untrusted" },
        el("h4", {}, "From the order (written by the customer; policy does not read it)"),
        kv([
          ["customer", ev.order.customer_name, "customer-name"],
          ["order note", ev.order.note || "(none)", "order-note"],
          ["source", ev.order.source.tool + " (" + ev.order.source.observation + ")"],
        ])));
    }
    if (ev.policy_passages.length) {
      parts.push(el("p", { class: "muted" }, "Policy passages retrieved: " + ev.policy_passages.join(", ")));
    }
    return el("div", { class: "evidence" }, el("h3", {}, "Evidence the policy used"), parts);
  }

  function approvalCard(a) {
    const card = { approval: a, gone: false };
    card.left = el("span", { class: "left" }, "");
    card.outcome = el("p", { class: "outcome", role: "alert" });
    card.note = el("input", { type: "text", maxlength: "200", placeholder: "note (optional, recorded with the decision)", "aria-label": "note" });
    const decide = async (verb) => {
      card.grant.disabled = card.deny.disabled = true;
      card.outcome.className = "outcome";
      card.outcome.textContent = (verb === "grant" ? "Granting" : "Denying") + "…";
      const result = await api("POST", "/v1/approvals/" + encodeURIComponent(a.approval_id) + "/" + verb, { note: card.note.value });
      if (result.ok) {
        card.gone = true;
        card.outcome.className = "outcome done";
        card.outcome.textContent = (result.data.status === "granted" ? "Granted" : "Denied") + " by " + result.data.approver + ". The task resumes on its own.";
        card.node.classList.add("gone");
      } else {
        card.outcome.className = "outcome refused";
        card.outcome.textContent = "Refused: " + errorText(result);
        // A refusal for a reason that will not change keeps the buttons off.
        const final = result.status === 403 || result.status === 409 || result.status === 404;
        card.grant.disabled = card.deny.disabled = final;
      }
    };
    card.grant = el("button", { type: "button", class: "grant", onclick: () => decide("grant") }, "Grant");
    card.deny = el("button", { type: "button", class: "deny", onclick: () => decide("deny") }, "Deny");
    const args = Object.entries(a.args).map(([k, v]) => el("li", {}, el("code", {}, k), " = ", el("code", {}, json(v))));
    card.node = el("article", { class: "card approval", "data-approval-id": a.approval_id, "data-task-id": a.task_id },
      el("header", {},
        el("span", { class: "tool" }, a.tool + "@" + a.tool_version),
        a.amount ? el("span", { class: "amount" }, a.amount) : null,
        a.payment_id ? el("span", { class: "payment" }, "payment " + a.payment_id) : null,
        card.left),
      el("div", { class: "cols" },
        el("div", {},
          el("h3", {}, "The exact action"),
          el("ul", { class: "args" }, args),
          kv([
            ["action hash", a.action_hash, "hash"],
            ["policy", a.policy_version],
            ["reason", a.reason],
            ["requested by", a.requester, "requester"],
            ["task", el("a", { href: "#timeline/" + encodeURIComponent(a.task_id) }, a.task_id)],
            ["workflow", a.workflow],
            ["asked at", fmtTime(a.created_at)],
            ["expires at", fmtTime(a.expires_at)],
          ])),
        evidenceNode(a)),
      a.group_id ? groupNode(a) : null,
      el("footer", {}, card.note, card.grant, card.deny),
      card.outcome);
    return card;
  }

  // The effects of a plan asked for together: each with its exact arguments and the policy's
  // reason; Grant or Deny on the card decides them all (each still its own grant).
  function groupNode(a) {
    const list = el("ol", { class: "group" }, el("li", { class: "muted" }, "Loading the plan…"));
    api("GET", "/v1/approvals/" + encodeURIComponent(a.approval_id) + "/group").then((result) => {
      clear(list);
      if (!result.ok) { list.appendChild(el("li", { class: "refused" }, "Could not load the plan: " + errorText(result))); return; }
      for (const g of result.data.approvals) {
        const args = Object.entries(g.args).map(([k, v]) => el("li", {}, el("code", {}, k), " = ", el("code", {}, json(v))));
        list.appendChild(el("li", { "data-approval-id": g.approval_id },
          el("span", { class: "tool" }, g.tool + "@" + g.tool_version),
          el("ul", { class: "args" }, args),
          kv([["reason", g.reason], ["action hash", g.action_hash, "hash"], ["status", g.status]])));
      }
    });
    return el("div", { class: "plan-group" },
      el("h3", {}, "The whole plan: one decision grants or denies every effect"), list);
  }

  // -- timeline --------------------------------------------------------------------------------

  async function search(ev) {
    ev.preventDefault();
    const q = $("q").value.trim();
    const status = $("status-filter").value;
    $("search-error").textContent = "";
    clear($("timeline"));
    if (q) {
      // A task id first when it looks like one, else the idempotency key first.
      const byId = async () => ID_RE.test(q) ? api("GET", "/v1/tasks/" + encodeURIComponent(q)) : { ok: false };
      const byKey = async () => api("GET", "/v1/tasks?idempotency_key=" + encodeURIComponent(q));
      for (const find of q.startsWith("tsk_") ? [byId, byKey] : [byKey, byId]) {
        const found = await find();
        if (found.ok) { location.hash = "#timeline/" + encodeURIComponent(found.data.task_id); return; }
      }
      $("search-error").textContent = "No task of your tenant has this id or idempotency key.";
      return;
    }
    const result = await api("GET", "/v1/console/tasks?limit=50" + (status ? "&status=" + encodeURIComponent(status) : ""));
    if (!result.ok) { $("search-error").textContent = errorText(result); return; }
    const body = $("results").querySelector("tbody");
    clear(body);
    for (const t of result.data.tasks) {
      body.appendChild(el("tr", {},
        el("td", {}, el("a", { href: "#timeline/" + encodeURIComponent(t.task_id) }, t.task_id)),
        el("td", {}, t.workflow),
        el("td", {}, el("span", { class: "badge s-" + t.status }, t.display_status)),
        el("td", {}, fmtTime(t.created_at)),
        el("td", {}, fmtTime(t.updated_at))));
    }
    show($("results"), true);
    if (!result.data.tasks.length) $("search-error").textContent = "No tasks.";
  }

  async function openTimeline(taskId) {
    const render = async () => {
      const [tl, evs] = await Promise.all([
        api("GET", "/v1/console/tasks/" + encodeURIComponent(taskId) + "/timeline"),
        api("GET", "/v1/tasks/" + encodeURIComponent(taskId) + "/events"),
      ]);
      const box = $("timeline");
      if (!tl.ok) {
        clear(box);
        $("search-error").textContent = tl.status === 404 ? "No task of your tenant has this id." : errorText(tl);
        stopPolling();
        return;
      }
      clear(box);
      box.appendChild(timelineNode(tl.data, evs.ok ? evs.data.events : []));
      if (TERMINAL.has(tl.data.task.status)) stopPolling();
    };
    show($("results"), false);
    $("search-error").textContent = "";
    poll(render, POLL_MS.timeline);
  }

  function spanKind(s) {
    if (s.parent === null) return "root";
    if (s.name === "chat") return "model";
    if (s.name.startsWith("execute_tool ")) return "tool";
    if (s.name === "approval.wait") return "wait";
    if (s.name === "policy.evaluate") return "policy";
    if (s.name === "reconcile") return "reconcile";
    return "other";
  }

  function spanDetail(s) {
    const a = s.attrs || {};
    const bits = [];
    if (s.name === "chat") {
      bits.push(a["gen_ai.request.model"], (a["gen_ai.usage.input_tokens"] ?? "?") + " in / " + (a["gen_ai.usage.output_tokens"] ?? "?") + " out tokens");
      if (a.cost_inr !== undefined) bits.push("INR " + a.cost_inr);
      if (a.step_type) bits.push(a.step_type);
    }
    for (const k of ["decision", "policy.version", "outcome", "error.type", "idempotency_key", "reconcile.result", "approval.id"]) {
      if (a[k] !== undefined && !(s.name === "chat" && k === "outcome" && a[k] === "ok")) bits.push(k + "=" + a[k]);
    }
    if (a.worker_held === false) bits.push("worker_held=false");
    return bits.filter((b) => b !== undefined && b !== null).join("  ");
  }

  function bar(startMs, durMs, total, cls, title) {
    const left = Math.min(99.6, (startMs / total) * 100);
    const width = Math.max(0.4, Math.min(100 - left, (durMs / total) * 100));
    return el("div", { class: "track" },
      el("div", { class: "bar " + cls, title, style: { left: left + "%", width: width + "%" } }));
  }

  function waterfall(data) {
    const spans = data.trace.spans;
    if (!spans.length) return el("p", { class: "muted" }, "No events yet.");
    const total = Math.max(1, Number(spans[0].duration_ms) || 1);
    const depth = new Map([[spans[0].span_id, 0]]);
    const rows = [];
    rows.push(el("div", { class: "wf-row wf-head" },
      el("span", { class: "wf-name" }, "span"), el("span", { class: "wf-worker" }, "worker"),
      el("span", { class: "wf-axis" }, "0", el("span", { class: "right" }, fmtMs(total))),
      el("span", { class: "wf-dur" }, "duration"), el("span", { class: "wf-detail" }, "attributes")));
    for (const s of spans) {
      const d = s.parent === null ? 0 : (depth.get(s.parent) ?? 0) + 1;
      depth.set(s.span_id, d);
      const kind = spanKind(s);
      const status = s.status === "ERROR" ? " error" : "";
      rows.push(el("div", { class: "wf-row k-" + kind + status, "data-span": s.name },
        el("span", { class: "wf-name", style: { "padding-left": d * 14 + "px" } }, s.name),
        el("span", { class: "wf-worker" }, (s.attrs && s.attrs.worker) || ""),
        bar(Number(s.start_ms), Number(s.duration_ms), total, "b-" + kind + status, s.name + " at " + fmtMs(s.start_ms)),
        el("span", { class: "wf-dur" }, fmtMs(s.duration_ms)),
        el("span", { class: "wf-detail" }, spanDetail(s))));
    }
    for (const c of data.worker_changes) {
      const label = c.lease_expired ? "lease gap" : "worker change";
      rows.push(el("div", { class: "wf-row k-gap", "data-span": label },
        el("span", { class: "wf-name" }, label),
        el("span", { class: "wf-worker" }, c.from_worker + " → " + c.to_worker),
        bar(c.start_ms, c.gap_ms, total, "b-gap", label),
        el("span", { class: "wf-dur" }, fmtMs(c.gap_ms)),
        el("span", { class: "wf-detail" }, c.lease_expired ? "the lease of " + c.from_worker + " lapsed; " + c.to_worker + " took the task over" : "handed over between steps")));
    }
    return el("div", { class: "waterfall" }, rows);
  }

  function timelineNode(data, events) {
    const t = data.task;
    const spans = data.trace.spans;
    const models = spans.filter((s) => s.name === "chat");
    const parts = [];
    parts.push(el("header", { class: "task-head" },
      el("h2", {}, t.task_id),
      el("span", { class: "badge s-" + t.status, id: "task-status" }, t.status),
      el("span", { class: "muted" }, t.display_status)));
    parts.push(kv([
      ["workflow", t.workflow], ["trace id", t.trace_id, "hash"], ["attempts", String(t.attempts)],
      ["created", fmtTime(t.created_at)], ["updated", fmtTime(t.updated_at)],
      ["parked", t.park ? t.park.reason + ": waits for " + t.park.waits_for + "; on waking " + t.park.on_waking : null],
      ["redaction", data.trace.redaction ? Object.entries(data.trace.redaction).map(([k, v]) => k + ": " + v).join(" · ") : null],
    ]));
    parts.push(el("h3", {}, "Waterfall"), waterfall(data));
    if (data.worker_changes.length) {
      parts.push(el("ul", { class: "changes" }, data.worker_changes.map((c) => el("li", {},
        "worker " + c.from_worker + " → " + c.to_worker + " after " + fmtMs(c.gap_ms) + (c.lease_expired ? " (lease expired)" : "")))));
    }
    parts.push(el("h3", {}, "Model calls"));
    parts.push(el("table", { class: "grid", id: "model-calls" },
      el("thead", {}, el("tr", {}, ["step", "model", "route", "input tokens", "output tokens", "cost (INR)", "outcome", "worker"].map((h) => el("th", {}, h)))),
      el("tbody", {}, models.map((s) => {
        const a = s.attrs || {};
        return el("tr", {}, el("td", {}, a.step_type || ""), el("td", {}, a["gen_ai.request.model"] || ""), el("td", {}, a.route || ""),
          el("td", { class: "num" }, a["gen_ai.usage.input_tokens"] ?? ""), el("td", { class: "num" }, a["gen_ai.usage.output_tokens"] ?? ""),
          el("td", { class: "num" }, a.cost_inr ?? ""), el("td", {}, a.outcome || ""), el("td", {}, a.worker || ""));
      })),
      el("tfoot", {}, el("tr", {}, el("td", {}, "total"), el("td", {}, data.model.calls + " calls"), el("td", {}),
        el("td", { class: "num" }, data.model.input_tokens), el("td", { class: "num" }, data.model.output_tokens),
        el("td", { class: "num" }, data.model.cost_inr), el("td", {}), el("td", {})))));
    parts.push(el("h3", {}, "Tool calls"));
    parts.push(el("table", { class: "grid", id: "tool-calls" },
      el("thead", {}, el("tr", {}, ["tool", "outcome", "error", "idempotency key", "worker", "duration"].map((h) => el("th", {}, h)))),
      el("tbody", {}, data.tools.map((c) => el("tr", { class: c.outcome === "unknown" ? "unknown" : null },
        el("td", {}, c.tool), el("td", {}, c.outcome || ""), el("td", {}, c.error_type || ""),
        el("td", {}, c.idempotency_key || ""), el("td", {}, c.worker || ""), el("td", { class: "num" }, fmtMs(c.duration_ms)))))));
    if (data.evidence && data.evidence.agent) {
      parts.push(el("h3", {}, "Facts and plan of effects"), el("div", { id: "task-evidence" }, agentEvidenceNode(data.evidence.agent)));
    }
    parts.push(el("h3", {}, "Customer reply and verdict"));
    const v = data.verdict;
    parts.push(el("p", { id: "verdict", class: v.verified ? "verified" : "unverified" },
      v.verified === true ? "Verified: every claim in the reply checked against ledger facts." :
        v.verified === false ? "Not verified." : "No verdict yet.",
      v.redrafts ? " Redrafts: " + v.redrafts + "." : "",
      v.reason ? " Reason: " + v.reason : ""));
    parts.push(data.reply !== null ? el("blockquote", { id: "reply" }, data.reply) : el("p", { class: "muted" }, "No reply yet."));
    parts.push(el("details", {},
      el("summary", {}, "Event log (" + events.length + " events, redacted)"),
      el("table", { class: "grid events" },
        el("thead", {}, el("tr", {}, ["seq", "at", "event", "transition", "by", "data"].map((h) => el("th", {}, h)))),
        el("tbody", {}, events.map((e) => el("tr", {},
          el("td", { class: "num" }, e.seq), el("td", {}, fmtTime(e.at)), el("td", {}, e.type),
          el("td", {}, (e.from_status || "") + (e.to_status ? " → " + e.to_status : "")),
          el("td", {}, (e.data && e.data.by) || ""),
          el("td", { class: "data" }, json(e.data))))))));
    return el("article", { class: "card timeline", "data-task-id": t.task_id }, parts);
  }

  // -- queues ----------------------------------------------------------------------------------

  async function loadQueues() {
    if (!isOperator()) {
      $("queues-error").textContent = "Your token does not carry the operator role: queues are not shown.";
      return;
    }
    const result = await api("GET", "/v1/console/queues");
    const box = $("queue-stats");
    if (!result.ok) { $("queues-error").textContent = "Could not load the queue: " + errorText(result); return; }
    $("queues-error").textContent = "";
    const q = result.data;
    clear(box);
    box.appendChild(el("table", { class: "grid", id: "queue-table" },
      el("thead", {}, el("tr", {}, ["tenant", "queue", "depth", "oldest message", "held", "oldest held", "in flight"].map((h) => el("th", {}, h)))),
      el("tbody", {}, el("tr", {},
        el("td", {}, q.tenant_id), el("td", {}, el("code", {}, q.queue)),
        el("td", { class: "num", id: "queue-depth" }, q.depth === null ? "unknown" : q.depth),
        el("td", { class: "num" }, q.oldest_age_s === null ? "-" : fmtMs(q.oldest_age_s * 1000)),
        el("td", { class: "num", id: "queue-held" }, q.held),
        el("td", { class: "num" }, q.held_oldest_s === null ? "-" : fmtMs(q.held_oldest_s * 1000)),
        el("td", { class: "num", id: "queue-in-flight" }, q.in_flight)))));
    box.appendChild(el("h3", {}, "Unfinished tasks by status"));
    const statuses = Object.entries(q.by_status);
    box.appendChild(statuses.length
      ? el("ul", { class: "chips", id: "by-status" }, statuses.map(([s, n]) => el("li", {},
          el("a", { href: "#timeline", onclick: () => { $("status-filter").value = s; } }, el("span", { class: "badge s-" + s }, s), " " + n))))
      : el("p", { class: "muted" }, "None."));
    renderDeadLetters(q.dead_letters);
    await loadWebhooks();
    if (isOperator()) await loadSwitches();
  }

  // -- webhooks (the tenant's endpoints, their health and the deliveries that failed) -----------

  async function loadWebhooks() {
    const [endpoints, dead] = await Promise.all([
      api("GET", "/v1/webhooks"),
      api("GET", "/v1/webhooks/deliveries?status=dead&limit=20"),
    ]);
    const box = $("webhook-box");
    if (!endpoints.ok || !dead.ok) {
      $("webhooks-error").textContent = "Could not load the webhooks: " + errorText(endpoints.ok ? dead : endpoints);
      return;
    }
    $("webhooks-error").textContent = "";
    clear(box);
    const n = endpoints.data.deliveries;
    box.appendChild(el("p", { id: "webhook-counts" },
      "Deliveries: " + n.delivered + " delivered, " + n.pending + " pending, " + n.dead + " dead."));
    box.appendChild(endpoints.data.endpoints.length
      ? el("table", { class: "grid", id: "webhook-table" },
          el("thead", {}, el("tr", {}, ["endpoint", "url", "events", "state", "failing since"].map((h) => el("th", {}, h)))),
          el("tbody", {}, endpoints.data.endpoints.map((e) => el("tr", {},
            el("td", {}, el("code", {}, e.id)), el("td", {}, e.url), el("td", {}, e.event_types.join(", ")),
            el("td", {}, e.enabled ? "enabled" : "disabled " + fmtTime(e.disabled_at) + ": " + (e.disabled_reason || "")),
            el("td", {}, e.failing_since ? fmtTime(e.failing_since) : "-")))))
      : el("p", { class: "muted" }, "No endpoint registered (POST /v1/webhooks)."));
    if (dead.data.deliveries.length) {
      box.appendChild(el("table", { class: "grid", id: "webhook-dead" },
        el("thead", {}, el("tr", {}, ["webhook-id", "event", "task", "attempts", "last answer"].map((h) => el("th", {}, h)))),
        el("tbody", {}, dead.data.deliveries.map((d) => el("tr", {},
          el("td", {}, el("code", {}, d.msg_id)), el("td", {}, d.event_type), el("td", {}, d.task_id || ""),
          el("td", { class: "num" }, d.attempts),
          el("td", {}, d.last_status ? "HTTP " + d.last_status : (d.last_error || "")))))));
    }
  }

  // -- operator controls (role `operator`: the /v1/ops API, within the token's tenant) ---------

  // The switches the API accepts (`Kind` in agent_jobs/ops/switches.py): whether a target is
  // required, allowed or not taken, and what the value is (none: on/off).
  const SWITCH_KINDS = {
    tool_disabled: { target: "required", value: null, help: "target: the tool (e.g. refunds.create)" },
    read_only: { target: null, value: null, help: "only tools without side effects run" },
    paused: { target: "optional", value: null, help: "target: a workflow (name or name@version), empty for all" },
    effects_stopped: { target: null, value: null, help: "writes wait, reads go on" },
    credential_epoch: { target: null, value: "epoch", help: "value: epoch seconds (empty: now); credentials minted before are void" },
    autonomy_threshold: { target: null, value: "int", help: "value: minor units; actions worth more wait for a person" },
  };

  const deadRows = new Map(); // "task id@dead-lettered at" -> the row on the page
  const switchControls = []; // the "Turn off" controls on the page
  let switchesSig = null;
  let historySig = null;

  function isOperator() { return me !== null && me.roles.includes("operator"); }

  // A button that opens an inline confirmation: a reason (required: the audit record) and an
  // explicit confirm button. `act(reason)` calls the API; `said(result)` is [ok, text] to show.
  function confirmable(label, confirmLabel, act, said) {
    const outcome = el("span", { class: "outcome", role: "alert" });
    const reason = el("input", { type: "text", maxlength: "1000", placeholder: "reason (required, recorded)", "aria-label": "reason" });
    const yes = el("button", { type: "button", class: "danger" }, confirmLabel);
    const no = el("button", { type: "button" }, "Cancel");
    const form = el("span", { class: "confirm", hidden: true }, reason, yes, no);
    const opener = el("button", { type: "button" }, label);
    const node = el("span", { class: "confirmable" }, opener, form, outcome);
    const close = () => { show(form, false); show(opener, true); reason.value = ""; };
    opener.addEventListener("click", () => { show(opener, false); show(form, true); outcome.textContent = ""; reason.focus(); });
    no.addEventListener("click", close);
    yes.addEventListener("click", async () => {
      const why = reason.value.trim();
      if (!why) { outcome.className = "outcome refused"; outcome.textContent = "A reason is required."; reason.focus(); return; }
      yes.disabled = no.disabled = reason.disabled = true;
      outcome.className = "outcome";
      outcome.textContent = "Sending…";
      const result = await act(why);
      yes.disabled = no.disabled = reason.disabled = false;
      if (result.ok) close();
      const [good, text] = said(result);
      outcome.className = good ? "outcome done" : "outcome refused";
      outcome.textContent = text;
    });
    return { node, isOpen: () => !form.hidden };
  }

  function renderDeadLetters(list) {
    const box = $("dead-letter-box");
    if (!$("dead-letters")) {
      const heads = ["task", "workflow", "reason", "attempts", "at"].concat(isOperator() ? ["replay"] : []);
      box.appendChild(el("table", { class: "grid", id: "dead-letters" },
        el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))), el("tbody", {})));
      box.appendChild(el("p", { class: "muted", id: "no-dead-letters" }, "No dead letters."));
    }
    // Rows are kept, not redrawn, so a replay being confirmed survives the refresh.
    const body = $("dead-letters").querySelector("tbody");
    const keys = list.map((d) => d.task_id + "@" + d.at);
    for (const [key, row] of deadRows) {
      if (!keys.includes(key)) { row.remove(); deadRows.delete(key); }
    }
    list.forEach((d, i) => {
      let row = deadRows.get(keys[i]);
      if (!row) { row = deadLetterRow(d); deadRows.set(keys[i], row); }
      if (body.children[i] !== row) body.insertBefore(row, body.children[i] || null);
    });
    show($("dead-letters"), list.length > 0);
    $("no-dead-letters").textContent = list.length ? "" : "No dead letters.";
  }

  function deadLetterRow(d) {
    const cells = [
      el("td", {}, el("a", { href: "#timeline/" + encodeURIComponent(d.task_id) }, d.task_id)),
      el("td", {}, d.workflow), el("td", {}, d.reason), el("td", { class: "num" }, d.attempts), el("td", {}, fmtTime(d.at)),
    ];
    if (isOperator()) {
      const replay = confirmable("Replay", "Confirm replay",
        (reason) => api("POST", "/v1/ops/dead-letters/" + encodeURIComponent(d.task_id) + "/replay", { reason }),
        (result) => {
          if (!result.ok) return [false, "Refused: " + errorText(result)];
          const r = result.data;
          const text = r.replayed ? "Replayed " + r.task_id + ": resumed as " + r.resumed_as + "." : "Not replayed: " + r.reason + ".";
          $("replay-outcome").className = "outcome " + (r.replayed ? "done" : "refused");
          $("replay-outcome").textContent = text;
          loadQueues();
          return [r.replayed, text];
        });
      cells.push(el("td", { class: "actions" }, replay.node));
    }
    return el("tr", { "data-task-id": d.task_id }, cells);
  }

  async function loadSwitches() {
    const [on, changes] = await Promise.all([
      api("GET", "/v1/ops/switches"), api("GET", "/v1/ops/switches/history?limit=50"),
    ]);
    if (!on.ok || !changes.ok) {
      $("ops-error").textContent = "Could not load the switches: " + errorText(on.ok ? changes : on);
      return;
    }
    $("ops-error").textContent = "";
    renderSwitches(on.data.switches);
    renderHistory(changes.data.changes);
  }

  function scopeOf(tenantId) { return tenantId === "" ? "all tenants" : tenantId; }

  function renderSwitches(list) {
    const sig = json(list);
    // Unchanged, or a "Turn off" being confirmed: leave the table as it is.
    if (sig === switchesSig || switchControls.some((c) => c.isOpen())) return;
    switchesSig = sig;
    switchControls.length = 0;
    const box = $("switches");
    clear(box);
    if (!list.length) { box.appendChild(el("p", { class: "muted", id: "no-switches" }, "No switch is on.")); return; }
    box.appendChild(el("table", { class: "grid", id: "switch-table" },
      el("thead", {}, el("tr", {}, ["switch", "tenant", "target", "value", "by", "reason", "since", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, list.map((s) => {
        let action = el("span", { class: "muted" }, "platform-wide (agent-jobs ops)");
        if (s.tenant_id !== "") {
          const off = confirmable("Turn off", "Confirm turn off",
            (reason) => api("POST", "/v1/ops/switches/" + encodeURIComponent(s.kind) + "/clear", { target: s.target, reason }),
            (result) => {
              if (!result.ok) return [false, "Refused: " + errorText(result)];
              const still = result.data.switches.some((x) => x.kind === s.kind && x.tenant_id === s.tenant_id && x.target === s.target);
              $("switch-outcome").className = "outcome " + (still ? "refused" : "done");
              $("switch-outcome").textContent = still ? s.kind + " is still on." : "Turned off " + s.kind + (s.target ? " " + s.target : "") + ".";
              switchesSig = null;
              loadSwitches();
              return [!still, still ? "Still on." : "Turned off."];
            });
          switchControls.push(off);
          action = off.node;
        }
        return el("tr", { "data-kind": s.kind, "data-target": s.target },
          el("td", {}, el("code", {}, s.kind)), el("td", {}, scopeOf(s.tenant_id)), el("td", {}, s.target || "-"),
          el("td", {}, json(s.value)), el("td", {}, s.actor), el("td", {}, s.reason), el("td", {}, fmtTime(s.changed_at)),
          el("td", { class: "actions" }, action));
      }))));
  }

  function renderHistory(changes) {
    const sig = json(changes);
    if (sig === historySig) return;
    historySig = sig;
    const box = $("switch-history");
    clear(box);
    if (!changes.length) { box.appendChild(el("p", { class: "muted" }, "No changes yet.")); return; }
    box.appendChild(el("table", { class: "grid", id: "history-table" },
      el("thead", {}, el("tr", {}, ["when", "who", "what", "why"].map((h) => el("th", {}, h)))),
      el("tbody", {}, changes.map((c) => el("tr", { "data-kind": c.kind },
        el("td", {}, fmtTime(c.at)), el("td", {}, c.actor),
        el("td", {}, el("code", {}, c.kind), (c.target ? " " + c.target : ""),
          c.value === null ? " turned off" : " turned on" + (c.value === true ? "" : " = " + json(c.value)),
          " (" + scopeOf(c.tenant_id) + ")"),
        el("td", {}, c.reason))))));
  }

  // The "turn one on" form: checked here for the obvious, then confirmed, then the server's word.
  function switchRequest() {
    const kind = $("switch-kind").value;
    const spec = SWITCH_KINDS[kind];
    const target = $("switch-target").value.trim();
    const raw = $("switch-value").value.trim();
    const reason = $("switch-reason").value.trim();
    if (spec.target === "required" && !target) return { error: kind + " needs a target." };
    const body = { target: spec.target ? target : "", reason };
    if (spec.value === "int") {
      if (!/^\d+$/.test(raw)) return { error: kind + " needs a whole number, 0 or more." };
      body.value = Number(raw);
    } else if (spec.value === "epoch" && raw) {
      if (!isFinite(Number(raw))) return { error: kind + " is a time in epoch seconds (or empty for now)." };
      body.value = Number(raw);
    }
    if (!reason) return { error: "A reason is required (it is the audit record)." };
    return { kind, body };
  }

  function kindChanged() {
    const spec = SWITCH_KINDS[$("switch-kind").value];
    $("switch-target").disabled = !spec.target;
    $("switch-value").disabled = !spec.value;
    if (!spec.target) $("switch-target").value = "";
    if (!spec.value) $("switch-value").value = "";
    $("switch-help").textContent = spec.help;
  }

  function setUpSwitchForm() {
    for (const kind of Object.keys(SWITCH_KINDS)) $("switch-kind").appendChild(el("option", { value: kind }, kind));
    $("switch-kind").addEventListener("change", kindChanged);
    kindChanged();
    let pending = null;
    const confirming = (on) => {
      show($("switch-confirm"), on);
      $("switch-on").disabled = on;
      for (const id of ["switch-kind", "switch-target", "switch-value", "switch-reason"]) $(id).readOnly = on;
      $("switch-kind").disabled = on;
    };
    $("switch-on").addEventListener("click", () => {
      const req = switchRequest();
      if (req.error) { $("switch-outcome").className = "outcome refused"; $("switch-outcome").textContent = req.error; return; }
      pending = req;
      const b = req.body;
      $("switch-outcome").textContent = "";
      $("switch-confirm-text").textContent = "Turn on " + req.kind + " for " + me.tenant_id +
        (b.target ? ", target " + b.target : "") + (b.value !== undefined ? ", value " + b.value : "") + ", because: " + b.reason + "?";
      confirming(true);
    });
    $("switch-confirm-no").addEventListener("click", () => { pending = null; confirming(false); });
    $("switch-confirm-yes").addEventListener("click", async () => {
      if (pending === null) return;
      $("switch-confirm-yes").disabled = true;
      const result = await api("PUT", "/v1/ops/switches/" + encodeURIComponent(pending.kind), pending.body);
      $("switch-confirm-yes").disabled = false;
      pending = null;
      confirming(false);
      if (!result.ok) {
        $("switch-outcome").className = "outcome refused";
        $("switch-outcome").textContent = "Refused: " + errorText(result);
        return;
      }
      const s = result.data;
      $("switch-outcome").className = "outcome done";
      $("switch-outcome").textContent = "Turned on " + s.kind + (s.target ? " " + s.target : "") + " by " + s.actor + ".";
      $("switch-reason").value = "";
      switchesSig = null;
      kindChanged();
      loadSwitches();
    });
  }

  function resetOps() {
    deadRows.clear();
    switchControls.length = 0;
    switchesSig = historySig = null;
    for (const id of ["dead-letter-box", "queue-stats", "switches", "switch-history"]) clear($(id));
    for (const id of ["replay-outcome", "switch-outcome", "ops-error"]) $(id).textContent = "";
    show($("switch-confirm"), false);
    show($("ops"), false);
  }

  // -- releases (roles `operator` or `release_manager` read; `release_manager` acts) -----------

  function canReadReleases() { return me !== null && (me.roles.includes("operator") || me.roles.includes("release_manager")); }

  function isReleaseManager() { return me !== null && me.roles.includes("release_manager"); }

  function forgetRelease() {
    clear($("release-detail"));
  }

  function verdictText(e) {
    if (!e) return "not run";
    return e.verdict + (e.full ? "" : " (partial)") + (e.matches_manifest ? "" : ", another manifest");
  }

  function shortHash(h) { return h ? h.slice(0, 19) + "…" : "-"; }

  async function loadReleases() {
    if (!canReadReleases()) {
      $("releases-error").textContent = "Your token carries neither the operator nor the release_manager role: releases are not shown.";
      return;
    }
    const result = await api("GET", "/v1/releases");
    if (!result.ok) { $("releases-error").textContent = "Could not load the releases: " + errorText(result); return; }
    $("releases-error").textContent = "";
    const list = result.data.releases;
    const body = $("releases-table").querySelector("tbody");
    clear(body);
    for (const rel of list.slice().reverse()) {
      body.appendChild(el("tr", { "data-release-id": rel.release_id },
        el("td", {}, el("a", { href: "#releases/" + encodeURIComponent(rel.release_id) }, rel.release_id)),
        el("td", {}, rel.workflow),
        el("td", {}, el("span", { class: "badge r-" + rel.status }, rel.status)),
        el("td", { class: "hash", title: rel.manifest_hash || "" }, shortHash(rel.manifest_hash)),
        el("td", {}, verdictText(rel.last_eval)),
        el("td", {}, fmtTime(rel.created_at) + " by " + rel.created_by)));
    }
    show($("releases-table"), list.length > 0);
    show($("no-releases"), list.length === 0);
  }

  async function openRelease(releaseId) {
    const result = await api("GET", "/v1/releases/" + encodeURIComponent(releaseId));
    const box = $("release-detail");
    clear(box);
    if (!result.ok) {
      box.appendChild(el("p", { class: "error", role: "alert" }, result.status === 404 ? "No release has this id." : "Could not load the release: " + errorText(result)));
      return;
    }
    box.appendChild(releaseNode(result.data));
  }

  function suiteText(s) {
    return s.suite + ": " + (s.gate || "?") + (s.cases !== null ? " " + s.cases_passed + "/" + s.cases : "") +
      (s.safety_failures ? ", " + s.safety_failures + " safety failure(s)" : "") +
      (s.failed.length ? " (failed: " + s.failed.join(", ") + ")" : "");
  }

  function releaseNode(d) {
    const outcome = el("p", { class: "outcome", id: "release-outcome", role: "status" });
    const after = (verb) => (result) => {
      if (!result.ok) return [false, "Refused: " + errorText(result)];
      const again = $("release-detail");
      clear(again);
      again.appendChild(releaseNode(result.data));
      const said = $("release-outcome");
      said.className = "outcome done";
      said.textContent = verb + " " + d.release_id + ": " + (result.data.rollout ? "live is " + (result.data.rollout.incumbent || "none (built-in pins)") : "") + ".";
      loadReleases();
      return [true, verb + "."];
    };
    const actions = [];
    if (isReleaseManager()) {
      const path = "/v1/releases/" + encodeURIComponent(d.release_id);
      if (d.status === "live") {
        actions.push(confirmable("Roll back…", "Confirm rollback", (reason) => api("POST", path + "/rollback", { reason }), after("Rolled back")).node);
      } else {
        actions.push(confirmable("Promote…", "Confirm promote", (reason) => api("POST", path + "/promote", { reason }), after("Promoted")).node);
      }
    }
    const ro = d.rollout;
    return el("article", { class: "card release", "data-release-id": d.release_id },
      el("header", { class: "task-head" }, el("h2", {}, d.release_id), el("span", { class: "badge r-" + d.status, id: "release-status" }, d.status)),
      kv([
        ["workflow", d.workflow],
        ["manifest hash", d.manifest_hash || "(the stored manifest no longer parses)", "hash"],
        ["created", fmtTime(d.created_at) + " by " + d.created_by],
        ["eval status", d.eval_status || "no full eval"],
        ["live now", ro ? (ro.incumbent || "none (built-in pins)") + (ro.candidate ? "; " + ro.mode + " " + ro.candidate + " at " + ro.traffic_percent + "%" : "") : "none (built-in pins)"],
      ]),
      el("div", { class: "release-actions" }, actions),
      outcome,
      d.promote_problems.length
        ? el("div", { class: "untrusted", id: "promote-problems" }, el("h4", {}, "Promote would be refused"), el("ul", {}, d.promote_problems.map((p) => el("li", {}, p))))
        : el("p", { class: "muted", id: "promote-problems" }, "The gate allows promote (a passed full eval of this manifest)."),
      el("h3", {}, "Manifest"),
      kv(Object.entries(d.manifest).map(([k, v]) => [k, typeof v === "string" ? v : json(v)])),
      el("h3", {}, "Eval reports"),
      d.evals.length
        ? el("table", { class: "grid", id: "release-evals" },
            el("thead", {}, el("tr", {}, ["when", "by", "verdict", "manifest", "runs", "cases", "suites"].map((h) => el("th", {}, h)))),
            el("tbody", {}, d.evals.map((e) => el("tr", {},
              el("td", {}, fmtTime(e.at)), el("td", {}, e.actor),
              el("td", {}, e.verdict + (e.full ? "" : " (partial)")),
              el("td", { class: "hash", title: e.manifest_hash || "" }, e.matches_manifest ? "this one" : "another: " + shortHash(e.manifest_hash)),
              el("td", { class: "num" }, e.runs_per_case === null ? "-" : e.runs_per_case),
              el("td", { class: "num" }, e.cases === null ? "-" : e.cases_passed + "/" + e.cases),
              el("td", {}, el("ul", { class: "args" }, e.suites.map((s) => el("li", {}, suiteText(s)))))))))
        : el("p", { class: "muted" }, "No eval recorded (agent-jobs release eval " + d.release_id + ")."),
      el("h3", {}, "Audit trail"),
      d.audit.length
        ? el("table", { class: "grid", id: "release-audit" },
            el("thead", {}, el("tr", {}, ["when", "who", "what", "from → to", "why"].map((h) => el("th", {}, h)))),
            el("tbody", {}, d.audit.map((a) => el("tr", { "data-action": a.action },
              el("td", {}, fmtTime(a.at)), el("td", {}, a.actor), el("td", {}, el("code", {}, a.action)),
              el("td", {}, a.from_release || a.to_release ? (a.from_release || "none") + " → " + (a.to_release || "none") : "-"),
              el("td", {}, a.reason)))))
        : el("p", { class: "muted" }, "No changes yet."));
  }

  // -- start -----------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    const select = $("status-filter");
    for (const s of STATUSES) select.appendChild(el("option", { value: s }, s));
    $("login-form").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("token").value); });
    $("sign-out").addEventListener("click", () => signOut(""));
    $("search-form").addEventListener("submit", search);
    setUpSwitchForm();
    window.addEventListener("hashchange", route);
    if (token()) signIn(token()); else showLogin("");
  });
})();
