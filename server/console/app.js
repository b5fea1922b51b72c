// moat console: a thin client of the /v1 API. The API key lives in
// sessionStorage (this tab only) and goes out only as a bearer token to this
// origin. Everything a module returns is put on the page as text, never
// as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { key: sessionStorage.getItem("moat.key") || "", modules: [], current: null,
  tokens: JSON.parse(sessionStorage.getItem("moat.tokens") || "{}") };

async function api(method, path, body, headers) {
  const res = await fetch(path, { method, body, headers: Object.assign({ Authorization: "Bearer " + state.key }, headers || {}) });
  const type = res.headers.get("Content-Type") || "";
  let data;
  if (type.includes("json")) data = await res.json();
  else data = await res.text();
  return { status: res.status, ok: res.ok, data, id: res.headers.get("X-Request-Id") || "" };
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

// problemParts splits a problem response (RFC 9457) into a title, the
// status and code, and the detail, for an error box.
function problemParts(r) {
  if (r.data && typeof r.data === "object") {
    const code = r.data.code ? " · " + r.data.code : "";
    return { title: (r.data.title || "Error") + " (" + r.status + code + ")", detail: r.data.detail || JSON.stringify(r.data) };
  }
  return { title: "Error (" + r.status + ")", detail: String(r.data || "") };
}

// showError fills the error box of a view ("run" or "invoke"), or hides it
// for null.
function showError(view, err) {
  const box = $("#" + view + "-error");
  box.hidden = !err;
  $("#" + view + "-error-title").textContent = err ? err.title : "";
  $("#" + view + "-error-detail").textContent = err ? err.detail : "";
}

function problemText(r) {
  if (r.data && typeof r.data === "object") return (r.data.title || "Error") + ": " + (r.data.detail || JSON.stringify(r.data));
  return String(r.data || r.status);
}

// --- sign in ---
async function signIn(key) {
  state.key = key;
  const r = await api("GET", "/v1/whoami");
  if (!r.ok) { state.key = ""; sessionStorage.removeItem("moat.key"); throw new Error(problemText(r)); }
  sessionStorage.setItem("moat.key", key);
  const roles = r.data.roles.length ? " [" + r.data.roles.join(", ") + "]" : "";
  $("#whoami").textContent = r.data.user + "@" + r.data.org + roles;
  $("#signin").hidden = true; $("#app").hidden = false; $("#session").hidden = false;
  state.whoami = r.data;
  await Promise.all([loadPages(), loadModules(), loadLanguages(), loadConfirmations(), loadApprovals()]);
}

$("#signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#signin-error").textContent = "";
  try { await signIn($("#api-key").value.trim()); } catch (e) { $("#signin-error").textContent = e.message; }
});
$("#sign-out").addEventListener("click", () => { sessionStorage.clear(); location.reload(); });

// --- tabs ---
for (const t of document.querySelectorAll(".tab")) {
  t.addEventListener("click", () => {
    for (const o of document.querySelectorAll(".tab")) o.classList.toggle("active", o === t);
    for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== "tab-" + t.dataset.tab;
    if (t.dataset.tab === "audit") loadAudit();
    if (t.dataset.tab === "tasks") loadTasks();
    if (t.dataset.tab === "media") loadMedia();
    if (t.dataset.tab === "pages") loadPages();
    if (t.dataset.tab === "confirm") { loadConfirmations(); loadApprovals(); }
    if (t.dataset.tab === "keys") loadKeys();
  });
}

// --- modules ---
async function loadModules() {
  const r = await api("GET", "/v1/modules");
  if (!r.ok) return;
  state.modules = r.data.modules;
  const ul = $("#modules");
  ul.replaceChildren();
  $("#no-modules").hidden = state.modules.length > 0;
  for (const m of state.modules) {
    const li = el("li", { class: "module", "data-name": m.name },
      el("div", { class: "name" }, m.name),
      el("div", { class: "sub" }, (m.version ? "v" + m.version + " · " : "") + m.digest.slice(0, 12) + " · " + m.mode));
    li.addEventListener("click", () => selectModule(m.name));
    ul.append(li);
  }
  if (state.current && !state.modules.some((m) => m.name === state.current)) state.current = null;
  if (!state.current && state.modules.length) selectModule(state.modules[0].name);
}
$("#refresh-modules").addEventListener("click", loadModules);

function selectModule(name) {
  state.current = name;
  const m = state.modules.find((x) => x.name === name);
  for (const li of document.querySelectorAll("#modules li")) li.classList.toggle("selected", li.dataset.name === name);
  $("#module-empty").hidden = true; $("#module-detail").hidden = false; $("#result").hidden = true;
  $("#module-name").textContent = m.name;
  $("#module-meta").textContent = m.kind + " · " + m.digest.slice(0, 16) + (m.signer ? " · signed by " + m.signer : "");
  showModulePages(name);
  loadModuleManage(name);
  const sel = $("#action-select");
  sel.replaceChildren();
  for (const a of m.actions) {
    let label = a.name;
    if (a.roles && a.roles.length) label += "  (roles: " + a.roles.join(", ") + ")";
    if (a.confirm) label += "  · needs confirmation";
    sel.append(el("option", { value: a.name }, label));
  }
  showActionHelp();
}

// showActionHelp shows the selected action's description and input
// schema (moat.yaml's; the host checks every input against it) under the
// form, and a skeleton of the input as the placeholder.
function showActionHelp() {
  const m = state.modules.find((x) => x.name === state.current);
  const a = m && m.actions.find((x) => x.name === $("#action-select").value);
  const parts = [];
  if (a && a.description) parts.push(a.description);
  if (a && a.input_schema) parts.push("Input schema: " + JSON.stringify(a.input_schema));
  const help = $("#action-help");
  help.textContent = parts.join(" — ");
  help.hidden = parts.length === 0;
  $("#input").placeholder = a && a.input_schema ? inputSkeleton(a.input_schema) : "The action's input (sent as the request body)";
}
$("#action-select").addEventListener("change", showActionHelp);

function inputSkeleton(s) {
  const blank = { string: "", integer: 0, number: 0, boolean: false, array: [], object: {} };
  if (s.type !== "object" || !s.properties) return "JSON, as the input schema says";
  const o = {};
  for (const [k, p] of Object.entries(s.properties)) o[k] = p && p.type in blank ? blank[p.type] : null;
  return JSON.stringify(o);
}

$("#invoke-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const btn = $("#invoke"); btn.disabled = true;
  try {
    const action = $("#action-select").value;
    const r = await api("POST", "/v1/modules/" + encodeURIComponent(state.current) + "/actions/" + encodeURIComponent(action) + "?logs=true",
      $("#input").value, { "Content-Type": "application/octet-stream" });
    await showResult(r);
  } finally { btn.disabled = false; }
});

// outputOf is the action's output in an invocation answered with
// ?logs=true (the envelope's output; base64 marked as such).
function outputOf(r) {
  if (!r.ok || !r.data || typeof r.data !== "object") return "";
  return r.data.encoding === "base64" ? "(not UTF-8; base64) " + r.data.output : r.data.output;
}

// showLogs lists an invocation's guest log records (the envelope's, or a
// problem's for a failed one), each field as text.
function showLogs(r) {
  const tb = $("#invoke-logs");
  tb.replaceChildren();
  const d = r.data && typeof r.data === "object" ? r.data : {};
  const logs = Array.isArray(d.logs) ? d.logs : [];
  for (const l of logs) {
    const fields = l.fields ? JSON.stringify(l.fields) : "";
    tb.append(el("tr", { class: "log-" + String(l.level || "").toLowerCase() }, el("td", { class: "mono" }, new Date(l.time).toLocaleTimeString()),
      el("td", {}, l.stream ? l.level + " · " + l.stream : l.level), el("td", { class: "mono log-message" }, l.message), el("td", { class: "mono" }, fields)));
  }
  $("#invoke-no-logs").hidden = logs.length > 0 || r.status === 428;
  const dropped = $("#invoke-logs-dropped");
  dropped.hidden = !d.logs_dropped;
  dropped.textContent = d.logs_dropped ? d.logs_dropped + " more record(s) not shown: a response carries at most 200 records and 64 KiB of them; the server's log has them all." : "";
}

async function showResult(r) {
  $("#result").hidden = false;
  const pill = $("#result-status");
  pill.className = "pill " + (r.ok ? "ok" : r.status === 428 ? "warn" : "bad");
  pill.textContent = r.ok ? "200 OK" : r.status + " " + ((r.data && r.data.title) || "");
  $("#result-id").textContent = "request " + r.id;
  $("#result-corr").textContent = r.id;
  // An error is shown as an error, apart from the output box, which
  // holds only what the action returned.
  $("#output").textContent = outputOf(r);
  showError("invoke", r.ok || r.status === 428 ? null : problemParts(r));
  showLogs(r);
  showOutputMedia(r.ok ? r.data.output : "");
  const box = $("#confirm-box");
  box.hidden = true;
  if (r.status === 428 && r.data.confirmation) {
    const c = r.data.confirmation;
    state.tokens[c.token] = c; saveTokens();
    $("#confirm-summary").textContent = c.summary + " (expires " + new Date(c.expires_at).toLocaleTimeString() + ")";
    box.hidden = false;
    $("#confirm-approve").onclick = async () => { const res = await approve(c.token); await showResult(res); };
    box.dataset.token = c.token;
    $("#confirm-approve").hidden = false;
    $("#confirm-outcome").textContent = "Or wait: an approver of the organization may approve or deny it in their Confirmations tab.";
    loadConfirmations();
  }
  await showAudit(r.id);
}

async function showAudit(id) {
  const r = await api("GET", "/v1/audit?correlation_id=" + encodeURIComponent(id));
  const tb = $("#audit-table");
  tb.replaceChildren();
  if (!r.ok) return;
  for (const e of r.data.events) {
    tb.append(el("tr", {}, el("td", { class: "mono" }, new Date(e.time).toLocaleTimeString()), el("td", {}, e.kind),
      el("td", { class: e.decision || "" }, e.decision || ""), el("td", {}, e.op || e.action || ""), el("td", {}, e.code || ""), el("td", {}, e.reason || "")));
  }
}

$("#upload-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const fd = new FormData();
  for (const input of ev.target.querySelectorAll("input[type=file]")) if (input.files[0]) fd.append(input.name, input.files[0]);
  const r = await api("POST", "/v1/modules", fd);
  $("#upload-status").textContent = r.ok ? "Uploaded " + r.data.name + " (" + r.data.digest.slice(0, 12) + ")" : problemText(r);
  if (r.ok) { ev.target.reset(); state.current = r.data.name; await loadModules(); selectModule(r.data.name); }
});

// An archive of a plugin's directory goes up as the request body with
// its own type: the server unpacks it (bounded) and finds the plugin.
$("#archive-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target.querySelector("input[type=file]").files[0];
  if (!f) return;
  const n = f.name.toLowerCase();
  const type = n.endsWith(".zip") ? "application/zip" : n.endsWith(".gz") || n.endsWith(".tgz") ? "application/gzip" : "application/x-tar";
  const r = await api("POST", "/v1/modules", f, { "Content-Type": type });
  $("#archive-status").textContent = r.ok ? "Uploaded " + r.data.name + " (" + r.data.digest.slice(0, 12) + ")" : problemText(r);
  if (r.ok) { ev.target.reset(); state.current = r.data.name; await loadModules(); selectModule(r.data.name); }
});

// --- a module's manifest, grants, versions, delete ---
async function loadModuleManage(name) {
  $("#module-manage-status").textContent = "";
  const m = state.modules.find((x) => x.name === name);
  const grants = $("#module-grants");
  grants.replaceChildren();
  for (const a of (m && m.actions) || []) {
    grants.append(el("tr", {}, el("td", { class: "mono" }, a.name), el("td", {}, (a.roles || []).join(", ") || "any"),
      el("td", {}, (a.permissions || []).join(", ")), el("td", {}, a.confirm ? "yes" : "")));
  }
  const r = await api("GET", "/v1/modules/" + encodeURIComponent(name) + "/versions");
  const tb = $("#module-versions");
  tb.replaceChildren();
  $("#module-manifest").textContent = "";
  if (!r.ok || state.current !== name) return;
  for (const v of r.data.versions) {
    if (v.current) $("#module-manifest").textContent = v.manifest || "(uploaded without a manifest)";
    const cell = el("td", {});
    if (v.current) cell.append("current");
    else {
      const b = el("button", { class: "ghost small", type: "button", "data-restore": v.digest }, "Roll back to this");
      b.addEventListener("click", async () => {
        const res = await api("POST", "/v1/modules/" + encodeURIComponent(name) + "/versions/" + v.digest + "/restore");
        // Redrawn first (selectModule clears the status as it starts), then
        // told: else the message would last only as long as the reload.
        if (res.ok) { await loadModules(); selectModule(name); }
        $("#module-manage-status").textContent = res.ok ? "Now at " + (v.version || v.digest.slice(0, 12)) + "." : problemText(res);
      });
      cell.append(b);
    }
    tb.append(el("tr", { "data-digest": v.digest }, el("td", {}, v.version || ""), el("td", { class: "mono" }, v.digest.slice(0, 16)),
      el("td", {}, v.signed ? "yes" : ""), el("td", {}, new Date(v.uploaded_at).toLocaleString()), el("td", {}, v.uploaded_by), cell));
  }
}

$("#module-delete").addEventListener("click", async () => {
  const name = state.current;
  if (!name || !confirm("Delete module " + name + " and every version of it? Its callers get 404 from now on.")) return;
  const r = await api("DELETE", "/v1/modules/" + encodeURIComponent(name));
  $("#module-manage-status").textContent = r.ok ? "" : problemText(r);
  if (r.ok) { state.current = null; $("#module-detail").hidden = true; $("#module-empty").hidden = false; await loadModules(); }
});

// --- confirmations ---
function saveTokens() { sessionStorage.setItem("moat.tokens", JSON.stringify(state.tokens)); }

async function approve(token) {
  const r = await api("POST", "/v1/confirmations/" + encodeURIComponent(token) + "?logs=true");
  delete state.tokens[token]; saveTokens();
  loadConfirmations();
  return r;
}

async function loadConfirmations() {
  const r = await api("GET", "/v1/confirmations");
  if (!r.ok) return;
  const now = Date.now();
  for (const [t, c] of Object.entries(state.tokens)) if (new Date(c.expires_at).getTime() < now) delete state.tokens[t];
  saveTokens();
  const ul = $("#confirmations");
  ul.replaceChildren();
  const list = r.data.confirmations;
  $("#no-confirmations").hidden = list.length > 0;
  $("#pending-count").hidden = list.length === 0;
  $("#pending-count").textContent = list.length;
  for (const c of list) {
    const token = Object.keys(state.tokens).find((t) => state.tokens[t].module === c.module && state.tokens[t].action === c.action && state.tokens[t].expires_at === c.expires_at);
    const li = el("li", {}, el("div", { class: "name" }, c.module + " · " + c.action),
      el("div", { class: "sub" }, c.summary + " · expires " + new Date(c.expires_at).toLocaleTimeString()));
    if (token) {
      const b = el("button", { class: "primary small" }, "Approve and run");
      const out = el("pre", { class: "output", hidden: true });
      b.addEventListener("click", async () => { const res = await approve(token); out.hidden = false; out.textContent = res.ok ? outputOf(res) : problemText(res); });
      li.append(b, out);
    } else {
      li.append(el("div", { class: "sub" }, "requested elsewhere: approve it where it was requested, or wait for an approver"));
    }
    ul.append(li);
  }
  await checkOutcomes(list);
}

// A token this tab holds whose confirmation left the pending list was
// decided (here, by an approver, or expired): the tab asks the server
// what became of it and says so, and polls while any is pending.
const outcomeText = (st) => st.state === "approved" ? "approved by " + st.decided_by + " and run as you"
  : st.state === "denied" ? "denied by " + st.decided_by
  : st.state === "stale" ? "refused: the module changed before " + st.decided_by + " decided"
  : st.state === "confirmed" ? "confirmed" : st.state;

async function checkOutcomes(pending) {
  for (const [t, c] of Object.entries(state.tokens)) {
    if (pending.some((p) => p.module === c.module && p.action === c.action && p.expires_at === c.expires_at)) continue;
    delete state.tokens[t]; saveTokens(); // before the await: a concurrent poll reports it once
    const r = await api("GET", "/v1/confirmations/" + encodeURIComponent(t));
    if (!r.ok) continue;
    const text = c.module + " · " + c.action + ": " + outcomeText(r.data);
    $("#outcomes").prepend(el("li", { class: "outcome", "data-state": r.data.state }, el("div", { class: "sub" }, text)));
    const box = $("#confirm-box");
    if (box.dataset.token === t) {
      $("#confirm-outcome").textContent = "This request was " + outcomeText(r.data) + ".";
      $("#confirm-approve").hidden = true;
    }
  }
  clearTimeout(state.outcomePoll);
  if (Object.keys(state.tokens).length) state.outcomePoll = setTimeout(loadConfirmations, 2000);
}

// A tab brought back to the front asks at once, whatever a background
// tab's timers were throttled to.
document.addEventListener("visibilitychange", () => { if (!document.hidden && state.key && Object.keys(state.tokens).length) loadConfirmations(); });

// --- approvals (four-eyes) ---
$("#refresh-approvals").addEventListener("click", () => loadApprovals());

async function loadApprovals() {
  // Only an approver asks: anyone else's request would be a refusal in
  // the audit trail.
  $("#approvals-card").hidden = !(state.whoami && state.whoami.may_approve);
  if ($("#approvals-card").hidden) return;
  const r = await api("GET", "/v1/confirmations?all=1");
  if (!r.ok) return;
  const ul = $("#approvals");
  ul.replaceChildren();
  const list = r.data.confirmations;
  $("#no-approvals").hidden = list.length > 0;
  for (const c of list) {
    const mine = state.whoami && c.user === state.whoami.user;
    const preview = c.input_preview !== "" ? c.input_preview + (c.input_truncated ? "…" : "") : "(" + c.input_bytes + " bytes, not text)";
    const li = el("li", { class: "approval", "data-id": c.id },
      el("div", { class: "name" }, c.module + " · " + c.action),
      el("div", { class: "sub" }, "requested by " + c.user + " at " + new Date(c.created_at).toLocaleTimeString() + " · " + c.summary +
        " · expires " + new Date(c.expires_at).toLocaleTimeString()),
      el("div", { class: "sub" }, "input sha256 " + c.input_sha256.slice(0, 16) + "… (" + c.input_bytes + " bytes)"),
      el("pre", { class: "output preview" }, preview));
    const out = el("pre", { class: "output result", hidden: true });
    const decide = async (verb) => {
      const res = await api("POST", "/v1/confirmations/id/" + encodeURIComponent(c.id) + "/" + verb + "?logs=true");
      out.hidden = false;
      out.textContent = !res.ok ? problemText(res) : verb === "deny" ? "denied" : outputOf(res);
      for (const b of li.querySelectorAll("button")) b.disabled = true;
    };
    if (mine) {
      li.append(el("div", { class: "sub" }, "your own request: another approver decides it"));
    } else {
      const yes = el("button", { class: "primary small approve" }, "Approve and run as " + c.user);
      const no = el("button", { class: "ghost small deny" }, "Deny");
      yes.addEventListener("click", () => decide("approve"));
      no.addEventListener("click", () => decide("deny"));
      li.append(yes, no);
    }
    li.append(out);
    ul.append(li);
  }
}

// --- audit ---
$("#audit-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadAudit(); });
async function loadAudit() {
  const q = new URLSearchParams();
  if ($("#audit-correlation").value) q.set("correlation_id", $("#audit-correlation").value);
  if ($("#audit-module").value) q.set("module", $("#audit-module").value);
  if ($("#audit-decision").value) q.set("decision", $("#audit-decision").value);
  q.set("limit", "200");
  const r = await api("GET", "/v1/audit?" + q);
  const tb = $("#audit-all");
  tb.replaceChildren();
  if (!r.ok) return;
  for (const e of r.data.events.reverse()) {
    const row = el("tr", { class: "audit-row", title: "Show every field", tabIndex: 0 }, el("td", { class: "mono" }, new Date(e.time).toLocaleString()), el("td", {}, e.kind),
      el("td", { class: e.decision || "" }, e.decision || ""), el("td", {}, e.module || ""), el("td", {}, e.op || e.action || ""),
      el("td", {}, e.user || ""), el("td", {}, e.code || ""), el("td", {}, e.reason || ""));
    const detail = el("tr", { class: "audit-detail", hidden: true }, el("td", { colSpan: 8 }, el("pre", { class: "output mono" }, JSON.stringify(e, null, 2))));
    const toggle = () => { detail.hidden = !detail.hidden; };
    row.addEventListener("click", toggle);
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") toggle(); });
    tb.append(row, detail);
  }
}

// --- keys ---
// The secret of a new or rotated key is in that one answer; the console
// shows it once, as text, and keeps it nowhere.
function splitList(v) { return v.split(",").map((x) => x.trim()).filter(Boolean); }

function showKeySecret(what, secret) {
  $("#key-secret-what").textContent = what;
  $("#key-secret").textContent = secret;
  $("#key-secret-box").hidden = !secret;
}

$("#refresh-keys").addEventListener("click", () => loadKeys());
$("#key-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#key-error").textContent = "";
  const body = {};
  if ($("#key-name").value) body.name = $("#key-name").value;
  if ($("#key-user").value) body.user = $("#key-user").value.trim();
  if ($("#key-roles").value) body.roles = splitList($("#key-roles").value);
  if ($("#key-scopes").value) body.scopes = splitList($("#key-scopes").value);
  const days = parseInt($("#key-days").value, 10);
  if (days > 0) body.expires_in_seconds = days * 86400;
  const r = await api("POST", "/v1/keys", JSON.stringify(body), { "Content-Type": "application/json" });
  if (!r.ok) { $("#key-error").textContent = problemText(r); return; }
  ev.target.reset();
  showKeySecret("Created " + r.data.id + ".", r.data.key);
  await loadKeys();
});

async function loadKeys() {
  const r = await api("GET", "/v1/keys");
  const tb = $("#keys-all");
  tb.replaceChildren();
  if (!r.ok) { $("#key-error").textContent = problemText(r); return; }
  const when = (t) => t ? new Date(t).toLocaleString() : "";
  for (const k of r.data.keys) {
    const actions = el("td", {});
    if (k.status !== "revoked") {
      const rotate = el("button", { class: "ghost small", type: "button", "data-rotate": k.id }, "Rotate");
      rotate.addEventListener("click", async () => {
        const res = await api("POST", "/v1/keys/" + encodeURIComponent(k.id) + "/rotate");
        if (!res.ok) { $("#key-error").textContent = problemText(res); return; }
        if (state.whoami && state.whoami.key_id === k.id) { state.key = res.data.key; sessionStorage.setItem("moat.key", res.data.key); }
        showKeySecret("Rotated " + k.id + "; the old secret no longer works.", res.data.key);
        await loadKeys();
      });
      const revoke = el("button", { class: "ghost small", type: "button", "data-revoke": k.id }, "Revoke");
      revoke.addEventListener("click", async () => {
        if (!confirm("Revoke " + k.id + (k.name ? " (" + k.name + ")" : "") + "? Every request with it is refused from now on.")) return;
        const res = await api("DELETE", "/v1/keys/" + encodeURIComponent(k.id));
        if (!res.ok) { $("#key-error").textContent = problemText(res); return; }
        await loadKeys();
      });
      actions.append(rotate, " ", revoke);
    }
    tb.append(el("tr", { "data-key": k.id }, el("td", { class: "mono" }, k.id), el("td", {}, k.name), el("td", {}, k.user),
      el("td", {}, k.roles.join(", ")), el("td", {}, k.scopes.length ? k.scopes.join(", ") : "all"),
      el("td", { class: "state-" + k.status }, k.status), el("td", {}, when(k.expires_at)),
      el("td", {}, k.last_used_at ? when(k.last_used_at) + " · " + k.last_used_addr : "never"), actions));
  }
}

// --- tasks ---
$("#tasks-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadTasks(); });
$("#refresh-tasks").addEventListener("click", () => loadTasks());
async function loadTasks() {
  const q = new URLSearchParams();
  if ($("#tasks-module").value) q.set("module", $("#tasks-module").value);
  if ($("#tasks-state").value) q.set("state", $("#tasks-state").value);
  q.set("limit", "200");
  const r = await api("GET", "/v1/tasks?" + q);
  const tb = $("#tasks-all");
  tb.replaceChildren();
  if (!r.ok) return;
  $("#no-tasks").hidden = r.data.tasks.length > 0;
  for (const k of r.data.tasks) {
    const runs = k.state === "queued" ? new Date(k.run_at).toLocaleString() : "";
    tb.append(el("tr", {}, el("td", { class: "mono" }, new Date(k.created_at).toLocaleString()), el("td", {}, k.module),
      el("td", {}, k.action), el("td", { class: "state-" + k.state }, k.state), el("td", {}, k.attempts + "/" + k.max_attempts),
      el("td", {}, k.user), el("td", { class: "mono" }, runs), el("td", {}, k.error || ""), el("td", { class: "mono" }, k.id)));
  }
}

// --- media ---
// An item's bytes come only from this server: images are <img> elements
// whose src is a signed URL (an <img> sends no API key), anything else a
// link to one, which the server serves as an attachment.
const mediaID = /^[0-9a-f]{64}$/;
async function signedMediaURL(id) {
  const r = await api("POST", "/v1/media/" + id + "/url");
  return r.ok ? r.data.url : "";
}

function humanSize(n) {
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

async function mediaCard(it) {
  const url = await signedMediaURL(it.id);
  const card = el("figure", { class: "media-item", "data-id": it.id });
  if (url && it.type.startsWith("image/")) card.append(el("img", { src: url, alt: it.id.slice(0, 12), loading: "lazy" }));
  else if (url) card.append(el("a", { href: url, class: "media-file" }, it.type));
  const dims = it.width ? " · " + it.width + "×" + it.height : "";
  card.append(el("figcaption", {}, el("div", { class: "mono" }, it.id.slice(0, 16)),
    el("div", { class: "sub" }, it.type + " · " + humanSize(it.size) + dims),
    el("div", { class: "sub" }, (it.module || "") + (it.created ? " · " + new Date(it.created).toLocaleString() : ""))));
  return card;
}

$("#media-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadMedia(); });
$("#refresh-media").addEventListener("click", () => loadMedia());
$("#media-more").addEventListener("click", () => loadMedia(state.mediaNext));
async function loadMedia(after) {
  const q = new URLSearchParams();
  if ($("#media-module").value) q.set("module", $("#media-module").value);
  if (after) q.set("after", after);
  q.set("limit", "24");
  const r = await api("GET", "/v1/media?" + q);
  const grid = $("#media-all");
  if (!after) grid.replaceChildren();
  if (!r.ok) return;
  $("#no-media").hidden = r.data.items.length > 0 || !!after;
  state.mediaNext = r.data.next;
  $("#media-more").hidden = !r.data.next;
  for (const card of await Promise.all(r.data.items.map(mediaCard))) grid.append(card);
}

// showOutputMedia previews the item an action's output names, when it is
// a JSON object whose id is one of the organization's media items (as
// media.put, media.fetch and media.thumbnail answer).
async function showOutputMedia(out) {
  const box = $("#output-media");
  box.replaceChildren();
  box.hidden = true;
  let v;
  try { v = JSON.parse(out); } catch { return; }
  if (!v || typeof v !== "object" || typeof v.id !== "string" || !mediaID.test(v.id) || typeof v.type !== "string") return;
  const card = await mediaCard({ id: v.id, type: v.type, size: Number(v.size) || 0, width: v.width, height: v.height });
  if (!card.querySelector("img, a")) return; // not an item of this organization
  box.append(card);
  box.hidden = false;
}

// --- run code ---
// hello (hello.json, loaded with the languages) holds a program per
// language the executor may offer (GET /v1/languages names them); each
// prints "hello from ..." (TestConsoleHelloWorlds runs every one the
// server offers). The tab opens on the first of preferred the server
// offers, with its hello world in the editor.
let hello = {};
const preferred = ["python", "javascript", "go", "rust", "c", "cpp", "ruby", "assemblyscript", "bash", "python3-native"];

// The editor: CodeMirror (editor.js, window.MoatEditor), or the plain
// textarea when that file did not load.
const editor = {
  cm: null,
  init() {
    if (this.cm || !$("#run-editor")) return;
    if (window.MoatEditor) {
      this.cm = window.MoatEditor.create($("#run-editor"), { doc: "", label: "Source",
        onChange: edited, onRun: () => $("#run-form").requestSubmit() });
      return;
    }
    $("#run-editor").hidden = true; $("#editor-missing").hidden = false; $("#run-source").hidden = false;
    $("#run-source").addEventListener("input", edited);
  },
  get value() { return this.cm ? this.cm.getValue() : $("#run-source").value; },
  set value(text) { if (this.cm) this.cm.setValue(text); else $("#run-source").value = text; },
  language(name) { if (this.cm) this.cm.setLanguage(name); $("#run-editor").dataset.language = name; },
};

function runShortcut(ev) {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); $("#run-form").requestSubmit(); }
}
$("#run-stdin").addEventListener("keydown", runShortcut);
$("#run-source").addEventListener("keydown", runShortcut);

// The draft: the language and, once the user has edited it, the code,
// kept in sessionStorage (this tab only, cleared on sign-out) so that a
// reload does not lose what was typed.
let draftTimer = 0;
function saveDraft() {
  const d = { language: $("#run-language").value };
  if (state.edited) d.code = editor.value;
  sessionStorage.setItem("moat.draft", JSON.stringify(d));
}
function edited() {
  state.edited = true;
  clearTimeout(draftTimer);
  draftTimer = setTimeout(saveDraft, 300);
}

// setHello puts the language's hello world in the editor; the code counts
// as untouched again.
function setHello(lang) {
  editor.value = hello[lang] || "";
  state.edited = false;
  saveDraft();
}

async function loadLanguages() {
  editor.init();
  const [r, h] = await Promise.all([api("GET", "/v1/languages"), fetch("/console/hello.json").then((x) => x.json()).catch(() => ({}))]);
  hello = h;
  const sel = $("#run-language");
  sel.replaceChildren();
  const langs = r.ok ? r.data.languages : [];
  state.languages = langs;
  $("#no-languages").hidden = langs.length > 0;
  $("#run-grid").hidden = langs.length === 0;
  // An unavailable language is listed, not offered: its option says so
  // and the state line under it what to install.
  for (const l of langs) sel.append(el("option", { value: l.name, disabled: l.state === "unavailable" }, l.name + " " + l.version + (l.state === "unavailable" ? " (unavailable)" : "")));
  const names = langs.filter((l) => l.state !== "unavailable").map((l) => l.name);
  let draft = {};
  try { draft = JSON.parse(sessionStorage.getItem("moat.draft") || "{}") || {}; } catch { draft = {}; }
  const first = names.includes(draft.language) ? draft.language : preferred.find((n) => names.includes(n)) || names[0];
  if (!first) return;
  sel.value = first;
  editor.language(first);
  showLangState();
  if (typeof draft.code === "string") { editor.value = draft.code; state.edited = true; } else setHello(first);
  // Switching language replaces untouched code with the new language's
  // hello world and keeps code the user typed or pasted (only its
  // highlighting changes): "Hello world" replaces it on request.
  sel.onchange = () => {
    editor.language(sel.value);
    showLangState();
    if (!state.edited) setHello(sel.value); else saveDraft();
  };
}
// A language's state is the server's (GET /v1/languages): ready, cold
// (its first run does first-time work: first_run says what), preparing
// (that work is in flight, since when), or unavailable (what to install).
// The console never guesses it: while a run is in flight, or while the
// chosen language is preparing (languages.warm at the server's start),
// it asks again every second.
function langStateText(l) {
  if (!l) return "";
  const head = l.name + " " + l.version + " · ";
  switch (l.state) {
    case "ready": return head + "ready";
    case "cold": return head + "cold: " + l.first_run + ".";
    case "preparing": return head + "preparing for " + Math.max(0, Math.round((Date.now() - new Date(l.since).getTime()) / 1000)) + " s: " + l.first_run + ".";
    case "unavailable": return head + "unavailable: " + l.missing + " Install it on the server: " + l.fix;
    default: return head + l.state;
  }
}

function showLangState() {
  const l = (state.languages || []).find((x) => x.name === $("#run-language").value);
  const p = $("#run-lang-state");
  p.textContent = langStateText(l);
  p.dataset.state = l ? l.state : "";
  if (l && l.state === "preparing") watchLanguages();
}

// refreshLanguages reads the languages' states again (the list itself is
// loadLanguages').
async function refreshLanguages() {
  const r = await api("GET", "/v1/languages");
  if (!r.ok) return;
  const byName = new Map(r.data.languages.map((l) => [l.name, l]));
  state.languages = (state.languages || []).map((l) => byName.get(l.name) || l);
  showLangState();
}

let watching = 0;
function watchLanguages() {
  if (watching) return;
  watching = setTimeout(async () => {
    watching = 0;
    await refreshLanguages();
  }, 1000);
}

$("#run-hello").addEventListener("click", () => { setHello($("#run-language").value); if (editor.cm) editor.cm.focus(); });

// The result side: status, output (stdout), logs (stderr), an error apart
// from both, and the run's audit events (GET /v1/audit by its
// correlation id).
function clearRun() {
  showError("run", null);
  $("#run-stdout").textContent = ""; $("#run-stderr").textContent = "";
  $("#run-audit").replaceChildren(); $("#run-no-audit").hidden = true;
  $("#run-meta").textContent = "";
}

// runError says what went wrong with a run the server did answer, or null
// when it ran to a zero exit.
function runError(d) {
  if (d.status === "ok") return null;
  const titles = { "compile-error": "Compile error", "runtime-error": "Runtime error", timeout: "Time limit", "memory-limit": "Memory limit",
    "output-limit": "Output limit", invalid: "Refused before it ran" };
  let title = (titles[d.status] || d.status) + (d.exit_code ? " (exit " + d.exit_code + ")" : "") + (d.signal ? " (signal " + d.signal + ")" : "");
  const parts = [];
  if (d.message) parts.push(d.message);
  if (d.compile_output) parts.push(d.compile_output);
  for (const v of d.violations || []) parts.push((v.file ? v.file + (v.line ? ":" + v.line : "") + ": " : "") + v.message + (v.rule ? " (" + v.rule + ")" : ""));
  if (!parts.length && d.stderr) parts.push("see the logs (stderr)");
  return { title, detail: parts.join("\n").trim() };
}

async function showRunAudit(id) {
  const tb = $("#run-audit");
  tb.replaceChildren();
  if (!id) return;
  const r = await api("GET", "/v1/audit?correlation_id=" + encodeURIComponent(id));
  if (!r.ok) return;
  for (const e of r.data.events) {
    tb.append(el("tr", {}, el("td", { class: "mono" }, new Date(e.time).toLocaleTimeString()), el("td", {}, e.kind),
      el("td", { class: e.decision || "" }, e.decision || ""), el("td", {}, [e.module, e.op || e.action].filter(Boolean).join(" · ")),
      el("td", {}, e.code || ""), el("td", {}, e.reason || "")));
  }
  $("#run-no-audit").hidden = r.data.events.length > 0;
}

$("#run-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const btn = $("#run");
  if (btn.disabled) return;
  btn.disabled = true;
  const lang = $("#run-language").value;
  const pill = $("#run-status");
  saveDraft();
  clearRun();
  pill.className = "pill running"; pill.textContent = "running…";
  // The first run of a language on a server does first-time work (an
  // interpreter compiled to machine code, Go's standard library):
  // seconds, not milliseconds. While the run is in flight, the server's
  // state of the language says whether that is what it is doing.
  const prep = $("#run-preparing");
  let inFlight = true;
  const poll = async () => {
    await refreshLanguages();
    if (!inFlight) return;
    const l = state.languages.find((x) => x.name === lang);
    if (l && l.state === "preparing") {
      prep.textContent = "Preparing " + lang + ": " + l.first_run + ". Later runs start fast.";
      prep.hidden = false;
      pill.className = "pill preparing"; pill.textContent = "preparing " + lang + "…";
    } else {
      prep.hidden = true;
      pill.className = "pill running"; pill.textContent = "running…";
    }
  };
  const timer = setInterval(poll, 700);
  try {
    const info = state.languages.find((l) => l.name === lang);
    const ext = info && info.extensions && info.extensions.length ? info.extensions[0] : "";
    const body = JSON.stringify({ language: lang, files: [{ name: "main" + ext, content: editor.value }], stdin: $("#run-stdin").value });
    let r;
    try {
      r = await api("POST", "/v1/runs", body, { "Content-Type": "application/json" });
    } catch (e) {
      r = { ok: false, status: 0, data: { title: "The request failed", detail: e.message } };
    }
    inFlight = false; clearInterval(timer); prep.hidden = true;
    refreshLanguages();
    if (!r.ok) {
      pill.className = "pill bad"; pill.textContent = r.status ? r.status + " " + ((r.data && r.data.title) || "error") : "no answer";
      showError("run", problemParts(r));
      await showRunAudit(r.id);
      return;
    }
    const d = r.data;
    const err = runError(d);
    pill.className = "pill " + (err ? "bad" : "ok");
    pill.textContent = err ? d.status : "ok";
    const b64 = d.encoding === "base64";
    $("#run-meta").textContent = d.language + " " + d.version + (d.compile_time_ms ? " · compile " + d.compile_time_ms.toFixed(0) + " ms" : "") +
      (d.status === "compile-error" || d.status === "invalid" ? "" : " · run " + d.run_time_ms.toFixed(1) + " ms") + (d.build_cached ? " · cached build" : "") + (b64 ? " · output in base64 (not UTF-8)" : "");
    $("#run-stdout").textContent = d.stdout;
    $("#run-stderr").textContent = d.stderr;
    showError("run", err);
    await showRunAudit(d.correlation_id || r.id);
  } finally { inFlight = false; clearInterval(timer); prep.hidden = true; btn.disabled = false; }
});

// --- pages ---
// A module's page runs in a frame with sandbox="allow-scripts" and no
// allow-same-origin, at a signed URL whose response carries the page's
// own policy (a sandbox, no network): its origin is opaque, so it reads
// neither this console's storage (the key) nor another page's. It talks
// to the console only by postMessage (moat-page.js), and the console
// treats every message as hostile: it answers only the frame it opened,
// checks each message's shape, calls only the page's own module (the
// module and page come from the console, never from the message), and
// shows confirmations itself.
const PAGE_PROTOCOL = "moat.page/1";
const PAGE_MAX_INFLIGHT = 8;
const page = { frame: null, module: "", name: "", inflight: 0, confirming: false };

async function loadPages() {
  const r = await api("GET", "/v1/pages");
  if (!r.ok) return;
  state.pages = r.data.pages;
  const ul = $("#page-menu");
  ul.replaceChildren();
  $("#no-pages").hidden = state.pages.length > 0;
  for (const p of state.pages) {
    const li = el("li", { class: "page", "data-module": p.module, "data-page": p.name },
      el("div", { class: "name" }, p.title),
      el("div", { class: "sub" }, p.module + " · " + p.name));
    li.addEventListener("click", () => openPage(p.module, p.name));
    ul.append(li);
  }
  if (state.current) showModulePages(state.current);
}
$("#refresh-pages").addEventListener("click", loadPages);

function showModulePages(module) {
  const list = (state.pages || []).filter((p) => p.module === module);
  $("#module-pages").hidden = list.length === 0;
  const box = $("#module-page-links");
  box.replaceChildren();
  for (const p of list) {
    const b = el("button", { class: "ghost small", type: "button", "data-page": p.name }, p.title);
    b.addEventListener("click", () => openPage(p.module, p.name));
    box.append(b);
  }
}

function showTab(name) {
  for (const o of document.querySelectorAll(".tab")) o.classList.toggle("active", o.dataset.tab === name);
  for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== "tab-" + name;
}

async function openPage(module, name) {
  showTab("pages");
  closePage();
  for (const li of document.querySelectorAll("#page-menu li")) li.classList.toggle("selected", li.dataset.module === module && li.dataset.page === name);
  const p = (state.pages || []).find((x) => x.module === module && x.name === name);
  $("#page-empty").hidden = true; $("#page-view").hidden = false;
  $("#page-title").textContent = p ? p.title : name;
  $("#page-meta").textContent = module + " · " + name;
  $("#page-error").textContent = "";
  const r = await api("POST", "/v1/modules/" + encodeURIComponent(module) + "/pages/" + encodeURIComponent(name) + "/url");
  if (!r.ok) { $("#page-error").textContent = problemText(r); return; }
  const f = document.createElement("iframe");
  f.className = "page-frame";
  f.setAttribute("sandbox", "allow-scripts");
  f.setAttribute("referrerpolicy", "no-referrer");
  f.title = (p ? p.title : name) + " (page of " + module + ")";
  f.src = r.data.url;
  Object.assign(page, { frame: f, module, name, inflight: 0 });
  $("#page-frame-box").replaceChildren(f);
}

function closePage() {
  if (page.frame) page.frame.remove();
  Object.assign(page, { frame: null, module: "", name: "", inflight: 0 });
}

// validPageMessage checks a message's shape; anything else is dropped.
function validPageMessage(m) {
  if (!m || typeof m !== "object" || m.moat !== PAGE_PROTOCOL) return false;
  if (!Number.isInteger(m.id) || m.id < 0 || m.id > 1e9) return false;
  switch (m.type) {
    case "hello": return true;
    case "call": return typeof m.action === "string" && /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(m.action) &&
      typeof m.input === "string" && m.input.length <= (1 << 20);
    case "confirm": return typeof m.text === "string" && m.text.length <= 1000;
    case "media": return typeof m.media === "string" && /^[A-Za-z0-9_-]{1,128}$/.test(m.media);
  }
  return false;
}

window.addEventListener("message", async (ev) => {
  const f = page.frame;
  if (!f || ev.source !== f.contentWindow) return; // only the frame this console opened
  const m = ev.data;
  if (!m || typeof m !== "object" || m.moat !== PAGE_PROTOCOL || !Number.isInteger(m.id) || m.id < 0 || m.id > 1e9) return;
  const module = page.module, name = page.name, win = f.contentWindow;
  const reply = (msg) => { if (page.frame === f) win.postMessage(Object.assign({ moat: PAGE_PROTOCOL, id: m.id }, msg), "*"); };
  if (!validPageMessage(m)) {
    reply({ ok: false, error: { code: "invalid_argument", detail: "the console refused the message: an action name is 1-64 of A-Za-z0-9._-, an input at most 1 MiB, a confirmation's text at most 1000 characters" } });
    return;
  }
  if (m.type === "hello") {
    const w = state.whoami || {};
    reply({ type: "context", user: w.user, org: w.org, module, page: name });
    return;
  }
  if (page.inflight >= PAGE_MAX_INFLIGHT) {
    reply({ ok: false, error: { code: "resource_exhausted", detail: "the page has " + PAGE_MAX_INFLIGHT + " requests in flight; wait for one to end" } });
    return;
  }
  page.inflight++;
  try {
    switch (m.type) {
      case "call": reply(await pageCall(module, name, m.action, m.input)); break;
      case "confirm": reply({ ok: true, result: await askPerson(module, name, m.text) }); break;
      case "media": {
        const r = await api("POST", "/v1/media/" + encodeURIComponent(m.media) + "/url");
        reply(r.ok ? { ok: true, result: r.data.url } : { ok: false, error: pageError(r) });
        break;
      }
    }
  } catch (e) {
    reply({ ok: false, error: { code: "failed", detail: String(e && e.message || e) } });
  } finally {
    if (page.frame === f) page.inflight--;
  }
});

function pageError(r) {
  if (r.data && typeof r.data === "object") return { code: r.data.code || "failed", detail: r.data.detail || "", status: r.status };
  return { code: "failed", detail: String(r.data || ""), status: r.status };
}

// pageCall invokes an action of the page's own module, through the
// page's route (the server checks the page's access and audits its
// name). A confirmation the action needs is shown by the console to the
// person; the page never sees its token.
async function pageCall(module, name, action, input) {
  const base = "/v1/modules/" + encodeURIComponent(module);
  let r = await api("POST", base + "/pages/" + encodeURIComponent(name) + "/actions/" + encodeURIComponent(action), input,
    { "Content-Type": "application/octet-stream" });
  if (r.status === 428 && r.data && r.data.confirmation) {
    const c = r.data.confirmation;
    if (!(await askPerson(module, name, c.summary))) return { ok: false, error: { code: "cancelled", detail: "the person did not confirm" } };
    r = await api("POST", "/v1/confirmations/" + encodeURIComponent(c.token));
  }
  if (!r.ok) return { ok: false, error: pageError(r) };
  return { ok: true, result: typeof r.data === "string" ? r.data : JSON.stringify(r.data) };
}

// askPerson shows a confirmation in the console, outside the page's
// frame, one at a time, and resolves true when the person confirms.
function askPerson(module, name, text) {
  if (page.confirming) return Promise.resolve(false);
  page.confirming = true;
  const d = $("#page-confirm");
  $("#page-confirm-module").textContent = module;
  $("#page-confirm-page").textContent = name;
  $("#page-confirm-text").textContent = text;
  return new Promise((resolve) => {
    const done = (yes) => { d.close(); page.confirming = false; resolve(yes); };
    $("#page-confirm-yes").onclick = () => done(true);
    $("#page-confirm-no").onclick = () => done(false);
    d.oncancel = (ev) => { ev.preventDefault(); done(false); };
    d.showModal();
  });
}

if (state.key) signIn(state.key).catch(() => {});
