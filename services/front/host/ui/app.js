// Horizon's dashboard: plain JavaScript, no build step, no third-party code. The server pushes a
// snapshot of every view over server-sent events (/api/stream) whenever the log moves; this file
// only draws it. Charts are inline SVG drawn here.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
};
const STATES = ["free", "busy", "reserved", "held", "cordoned", "down", "unhealthy"];
const STATE_HELP = {
  free: "free", busy: "busy (a job holds it)", reserved: "reserved for a pending job (backfill reservation)",
  held: "held for a preemptor while its victims stop", cordoned: "cordoned or drained node", down: "node down or not ready",
  unhealthy: "unhealthy device",
};
const state = { me: null, snap: null, view: "cluster", job: null, filters: {}, receivedAt: 0 };
window.horizon = state; // for tests and the curious

// ------------------------------------------------------------------ helpers

const FORMATS = {}; // one Intl.NumberFormat per precision: making one per number is slow
function fmtNum(x, digits = 0) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const f = FORMATS[digits] || (FORMATS[digits] = new Intl.NumberFormat(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits }));
  return f.format(Number(x));
}
function fmtDuration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, s);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 59.5) return `${s.toFixed(s < 9.95 ? 1 : 0)} s`;
  // round to the unit shown first: 299.6 s is 5 min 0 s, not 4 min 60 s
  if (s < 3599.5) { const t = Math.round(s); return `${Math.floor(t / 60)} min ${t % 60} s`; }
  if (s < 86370) { const m = Math.round(s / 60); return `${Math.floor(m / 60)} h ${m % 60} min`; }
  const h = Math.round(s / 3600);
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}
function fmtTime(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}
function fmtBytes(b) {
  if (!b) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(b < 10 && i ? 1 : 0)} ${units[i]}`;
}
function jobLink(id) {
  return el("a", { href: `#job/${encodeURIComponent(id)}`, class: "joblink", "data-job": id, text: id });
}
async function api(path, options = {}) {
  const res = await fetch(path, { credentials: "same-origin", ...options });
  let body = null;
  try { body = await res.json(); } catch (e) { body = { error: `${res.status} ${res.statusText}` }; }
  return { ok: res.ok, status: res.status, body };
}
async function action(kind, payload, question) {
  if (question && !window.confirm(question)) return;
  const { ok, body } = await api(`/api/action/${kind}`, {
    method: "POST", headers: { "Content-Type": "application/json", "X-Horizon-CSRF": state.me.csrf },
    body: JSON.stringify(payload),
  });
  $("#status").textContent = ok ? `${kind}: ${body.answer}` : `${kind} refused: ${body.error || body.reason}`;
}

// ------------------------------------------------------------------ charts (inline SVG)

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}
// series: [{name, color, points: [[t, v], ...], bars?}]
function drawChart(container, series, { from, to, yFormat = (v) => fmtNum(v, 1), yMax = null, empty = "no data yet" } = {}) {
  container.textContent = "";
  const W = 640, H = container.classList.contains("small") ? 120 : 220, L = 48, R = 10, T = 10, B = 22;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = empty;
    root.append(t);
    container.append(root);
    return;
  }
  // from the first point (at least 2 minutes shown), not the whole window the server keeps
  const t1 = Math.max(to ?? 0, ...all.map((p) => p[0]));
  const t0 = Math.max(from ?? -Infinity, Math.min(t1 - 120, ...all.map((p) => p[0]) ));
  let top = yMax ?? Math.max(...all.map((p) => p[1]), 0);
  if (top <= 0) top = 1;
  top *= yMax ? 1 : 1.1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    root.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#2a323c", "stroke-width": 1 }));
    const label = svg("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end" });
    label.textContent = yFormat(v);
    root.append(label);
  }
  for (let i = 0; i <= 4; i++) {
    const t = t0 + ((t1 - t0) * i) / 4;
    const label = svg("text", { x: x(t), y: H - 6, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" });
    label.textContent = new Date(t * 1000).toLocaleTimeString([], { hour12: false });
    root.append(label);
  }
  series.forEach((s, i) => {
    if (s.bars) {
      const w = Math.max(1, ((W - L - R) / Math.max(1, (t1 - t0) / (s.width || 5))) - 1);
      for (const [t, v] of s.points) {
        if (v > 0) root.append(svg("rect", { x: x(t), y: y(v), width: w, height: Math.max(0, y(0) - y(v)), fill: s.color }));
      }
    } else if (s.points.length) {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      root.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2 }));
      if (s.points.length === 1) root.append(svg("circle", { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 3, fill: s.color }));
    }
    const key = svg("text", { x: L + 8 + i * 90, y: T + 10 });
    key.setAttribute("style", `fill:${s.color}`);
    key.textContent = s.name;
    root.append(key);
  });
  container.append(root);
}

// ------------------------------------------------------------------ cluster

// a long id keeps its end, where generated ids and array tasks differ (the tooltip has it whole)
// (the tenant is written under it: a tenant's key, "acme:train", shows as "train")
function shortId(id, tenant) {
  if (tenant && id.startsWith(`${tenant}:`)) id = id.slice(tenant.length + 1);
  return id.length > 13 ? `…${id.slice(-12)}` : id;
}
function gpuCell(g, me) {
  const cls = ["gpu", g.state];
  if (g.other) cls.push("other");
  if (me && g.tenant === me) cls.push("mine");
  const title = [`${g.id}${g.type ? " (" + g.type + ")" : ""}, NUMA ${g.numa}: ${STATE_HELP[g.state] || g.state}`,
    g.job_id ? `job ${g.job_id}` : g.other ? "another tenant's job" : "", g.tenant ? `tenant ${g.tenant}` : "", g.why || ""]
    .filter(Boolean).join("\n");
  return el("div", {
    class: cls.join(" "), title, "data-gpu": g.id, "data-state": g.state, "data-job": g.job_id || null,
    onclick: g.job_id ? () => { location.hash = `#job/${encodeURIComponent(g.job_id)}`; } : null,
  },
  el("div", { class: "id", text: g.id }),
  el("div", { class: "job", text: g.job_id ? shortId(g.job_id, g.tenant) : g.other ? "other tenant" : g.state === "free" ? "" : g.state }),
  el("div", { class: "tenant", text: g.tenant || "" }));
}

function renderCluster(snap) {
  const gpus = snap.gpus || {};
  const counts = gpus.counts;
  const box = $("#gpu-counts");
  box.textContent = "";
  if (counts) {
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    box.append(el("div", {}, el("b", { text: total }), "GPUs"));
    for (const s of STATES) box.append(el("div", { "data-count": s }, el("b", { text: counts[s] || 0 }), s));
  } else if (gpus.error) {
    box.append(el("span", { class: "error", text: gpus.error }));
  }
  $("#cluster-note").textContent = gpus.partial || "";
  const legend = $("#legend");
  legend.textContent = "";
  for (const s of STATES) legend.append(el("span", {}, el("i", { style: `background:var(--${s})` }), s));
  if (snap.tenant) legend.append(el("span", {}, el("i", { style: "background:var(--other)" }), "another tenant's job"));
  const nodes = $("#nodes");
  nodes.textContent = "";
  for (const n of gpus.nodes || []) {
    const byNuma = {};
    for (const g of n.gpus || []) (byNuma[g.numa] = byNuma[g.numa] || []).push(g);
    const actions = [];
    if (state.me && state.me.operator && !gpus.partial) {
      const cordoned = ["cordoned", "draining", "drained"].includes(n.state);
      actions.push(el("button", {
        class: "small" + (cordoned ? "" : " danger"), "data-action": cordoned ? "uncordon" : "cordon",
        onclick: () => action(cordoned ? "uncordon" : "cordon", { node: n.node }, cordoned ? null : `Cordon ${n.node}? No new jobs will start on it.`),
        text: cordoned ? "uncordon" : "cordon",
      }));
    }
    const res = n.cpus_milli ? `CPU ${fmtNum(n.cpus_used_milli / 1000, 1)}/${fmtNum(n.cpus_milli / 1000)} · mem ${fmtBytes(n.memory_used_bytes)}/${fmtBytes(n.memory_bytes)}` : "";
    const card = el("div", { class: "node", "data-node": n.node },
      el("header", {}, el("span", { class: "name", text: n.node }), n.state ? el("span", { class: `badge ${n.state}`, text: n.state }) : null,
        n.simulated ? el("span", { class: "badge", text: "simulated" }) : null,
        n.backend ? el("span", { class: "badge backend", "data-backend": n.backend, title: "the backend that offers it", text: n.backend }) : null,
        n.held_for && n.held_for.length ? el("span", { class: "badge", text: `held for ${n.held_for.join(", ")}` }) : null,
        el("span", { class: "res", text: res }), ...actions));
    const numas = Object.keys(byNuma).sort((a, b) => a - b);
    for (const k of numas) {
      card.append(el("div", { class: "numa", "data-numa": k }, el("div", { class: "label", text: `NUMA ${k}` }),
        el("div", { class: "gpus" }, byNuma[k].map((g) => gpuCell(g, snap.tenant)))));
    }
    if (!numas.length) card.append(el("div", { class: "muted", text: "no GPUs" }));
    nodes.append(card);
  }
  const series = snap.series || {};
  drawChart($("#util-chart"), [{ name: "GPUs busy", color: "#3fa46a", points: series.utilisation || [] }],
    { from: series.from, to: series.to, yMax: 1, yFormat: (v) => `${Math.round(v * 100)}%` });
}

// ------------------------------------------------------------------ queue

function queueRows(snap) {
  const rows = [...((snap.queue || {}).jobs || [])];
  for (const j of (snap.running || {}).jobs || []) {
    rows.push({ ...j, rank: null, why: j.node ? `on ${j.node}` : "", running: true });
  }
  return rows;
}
function fillSelect(select, values, current) {
  const keep = current ?? select.value;
  select.textContent = "";
  select.append(el("option", { value: "", text: "all" }));
  for (const v of [...new Set(values)].filter((v) => v !== null && v !== undefined && v !== "").sort()) {
    select.append(el("option", { value: v, text: v }));
  }
  select.value = [...select.options].some((o) => o.value === keep) ? keep : "";
}
function breakdown(factors) {
  if (!factors) return el("span", { class: "muted", text: "–" });
  const entries = Object.entries(factors).filter(([, f]) => f.weighted > 0);
  const total = entries.reduce((a, [, f]) => a + f.weighted, 0) || 1;
  const title = Object.entries(factors).map(([k, f]) => `${k}: ${fmtNum(f.value, 3)} × ${fmtNum(f.weight)} = ${fmtNum(f.weighted, 1)}`).join("\n");
  return el("div", { class: "bar", title },
    entries.map(([k, f]) => el("span", { class: `f-${["class", "fairshare", "age", "estimate", "size", "qos", "partition"].includes(k) ? k : "other"}`, style: `width:${(100 * f.weighted) / total}%` })));
}
function renderQueue(snap) {
  const rows = queueRows(snap);
  const f = state.filters;
  fillSelect($("#f-tenant"), rows.map((r) => r.tenant), f.tenant);
  fillSelect($("#f-account"), rows.map((r) => r.account), f.account);
  fillSelect($("#f-partition"), [...rows.map((r) => r.partition), ...(((snap.partitions || {}).partitions) || []).map((p) => p.name)], f.partition);
  fillSelect($("#f-state"), ["PENDING", "HELD", "SCHEDULED", "RUNNING", ...rows.map((r) => r.state)], f.state);
  const shown = rows.filter((r) => (!f.tenant || r.tenant === f.tenant) && (!f.account || r.account === f.account)
    && (!f.partition || r.partition === f.partition) && (!f.state || r.state === f.state));
  const tbody = $("#queue-table tbody");
  tbody.textContent = "";
  const now = Date.now() / 1000;
  for (const r of shown) {
    const wait = r.running ? (r.started_ts || r.scheduled_ts) - r.submitted_ts : now - (r.submitted_ts || now);
    tbody.append(el("tr", { "data-job": r.job_id, "data-state": r.state },
      el("td", { text: r.rank ?? "" }), el("td", {}, jobLink(r.job_id)), el("td", { text: r.state }),
      el("td", { text: r.tenant }), el("td", { text: r.account }), el("td", { text: r.partition || "" }),
      el("td", { text: r.priority_class }), el("td", { text: r.gpus ?? "" }),
      el("td", { text: r.priority !== undefined ? fmtNum(r.priority) : "" }), el("td", {}, breakdown(r.factors)),
      el("td", { class: "nowrap", text: fmtDuration(wait) }), el("td", { class: "why", text: r.why || r.reason || "" }),
      el("td", {}, state.me && state.me.operator ? el("button", {
        class: "small danger", "data-action": "cancel",
        onclick: () => action("cancel", { job_id: r.job_id }, `Cancel ${r.job_id}?`), text: "cancel",
      }) : null)));
  }
  $("#queue-count").textContent = `${shown.length} of ${rows.length} jobs (queue in scheduling order, then running)`;
}

// ------------------------------------------------------------------ fair share

function renderFairshare(snap) {
  const usage = snap.usage || {};
  $("#fs-note").textContent = usage.error ? usage.error
    : `half-life ${fmtDuration(usage.half_life_s)}; usage weights: GPU ${usage.weights ? usage.weights.gpu : "–"}, CPU ${usage.weights ? usage.weights.cpu : "–"}`;
  // GPUs held by running jobs, charged to their account and to every account above it
  const parent = {};
  for (const r of usage.rows || []) if (!r.user) parent[r.account] = r.parent;
  const inUse = {};
  for (const j of (snap.running || {}).jobs || []) {
    for (let a = j.account, hops = 0; a && a !== "root" && hops < 64; a = parent[a], hops++) {
      inUse[a] = (inUse[a] || 0) + (j.gpus || 0) * (j.nodes || 1);
    }
  }
  const tbody = $("#fs-table tbody");
  tbody.textContent = "";
  for (const r of usage.rows || []) {
    const name = r.user ? `${r.account} / ${r.user}` : r.account;
    const factor = r.fairshare ?? r.level_fs;
    const quota = r.quota || {};
    const q = quota.gpus !== undefined && quota.gpus !== null ? `${inUse[r.account] || 0} / ${quota.gpus}` : `${inUse[r.account] || 0} / –`;
    tbody.append(el("tr", { "data-account": r.account },
      el("td", { style: `padding-left:${8 + 18 * (r.depth || 0)}px`, text: name }),
      el("td", { text: fmtNum(r.raw_shares, 0) }), el("td", { text: fmtNum(r.norm_shares, 3) }),
      el("td", { text: fmtNum(r.raw_usage, 1) }), el("td", { text: fmtNum(r.norm_usage, 3) }),
      el("td", { title: r.user ? "the association's fair-share factor" : "the account's level factor: its shares over its usage among its siblings" },
        el("span", { class: "meter" }, el("span", { style: `width:${Math.round(100 * Math.min(1, factor || 0))}%` })), fmtNum(factor, 3)),
      el("td", { text: r.running ?? 0 }), el("td", { text: r.user ? "" : q }),
      el("td", { text: r.borrowing ? "yes" : "" }), el("td", { text: (r.tenants || []).join(", ") })));
  }
}

// ------------------------------------------------------------------ one job's story

const DECISIONS = new Set(["JobAccepted", "JobRejected", "JobScheduled", "JobPreempted", "JobRequeued", "JobCancelled",
  "JobHeld", "JobReleased", "JobPriorityChanged", "JobStopRequested", "JobTimedOut", "JobUnschedulable", "JobShrunk", "JobGrown"]);
const ENDS = new Set(["JobSucceeded", "JobFailed", "JobCancelled", "JobTimedOut"]);
function detailText(e) {
  const d = e.detail || {};
  const bits = [];
  if (d.basis_seq !== undefined && d.basis_seq !== null) bits.push(`basis_seq ${d.basis_seq}`);
  for (const k of ["reason", "why", "node", "exit_code", "attempt", "cycle", "by", "for_job", "victims"]) {
    if (d[k] !== undefined && d[k] !== null && d[k] !== "" && !(Array.isArray(d[k]) && !d[k].length)) bits.push(`${k} ${Array.isArray(d[k]) ? d[k].join(",") : d[k]}`);
  }
  if (Array.isArray(d.allocations) && d.allocations.length) {
    bits.push("on " + d.allocations.map((a) => `${a.node}[${(a.device_ids || []).join(",")}]`).join(" "));
  }
  return bits.join(" · ");
}
async function loadJob(id) {
  state.job = id;
  $("#job-id").value = id;
  const body = $("#job-body");
  body.textContent = "loading…";
  const { ok, body: j } = await api(`/api/job?id=${encodeURIComponent(id)}`);
  if (state.job !== id) return;
  body.textContent = "";
  if (!ok) { body.append(el("p", { class: "error", id: "job-error", text: j.error })); return; }
  const row = j.job;
  const timeline = el("ul", { class: "timeline", id: "timeline" });
  const events = [...(j.events || [])];
  const acc = events.find((e) => e.type === "JobAccepted");
  if (acc && acc.detail && acc.detail.submitted_seq && !events.some((e) => e.seq === acc.detail.submitted_seq)) {
    // the input itself is on horizon.in.*: its acceptance names its sequence and time
    events.unshift({ seq: acc.detail.submitted_seq, type: "JobSubmitted", ts: acc.detail.submitted_ts, source: `${row.user} (input)`, detail: {} });
  }
  for (const e of events) {
    const cls = DECISIONS.has(e.type) || (e.detail && e.detail.basis_seq !== undefined) ? "decision" : "";
    timeline.append(el("li", { class: `${cls} ${ENDS.has(e.type) ? "end" : ""} ${e.type === "JobFailed" ? "bad" : ""}`, "data-seq": e.seq, "data-type": e.type },
      el("span", { class: "t", text: `${fmtTime(e.ts)} · seq ${e.seq}` }), el("span", { class: "type", text: e.type }),
      el("span", { class: "muted", text: e.source ? ` by ${e.source}` : "" }), el("span", { class: "verdict-slot" }),
      el("div", { class: "detail", text: detailText(e) })));
  }
  const attempts = el("table", { class: "grid" }, el("thead", {}, el("tr", {}, ["Attempt", "Nodes", "Scheduled", "Started", "Ended", "Outcome", "Reason"].map((h) => el("th", { text: h })))),
    el("tbody", {}, (j.attempts || []).map((a) => el("tr", {}, el("td", { text: a.attempt }), el("td", { text: a.node }),
      el("td", { text: fmtTime(a.scheduled_ts) }), el("td", { text: fmtTime(a.started_ts) }), el("td", { text: fmtTime(a.ended_ts) }),
      el("td", { text: a.outcome }), el("td", { text: a.reason || "" })))));
  const out = j.output || {};
  body.append(
    el("div", { class: "row" },
      el("div", { class: "card grow" }, el("h2", { text: `Job ${row.job_id}` }), el("dl", { class: "kv" },
        ...[["state", row.state], ["tenant", row.tenant], ["account", row.account], ["user", row.user], ["partition", row.partition],
          ["class", row.priority_class], ["resources", `${row.nodes} node(s) × ${row.gpus} GPU(s), ${fmtNum(row.cpus_milli / 1000, 1)} CPU, ${fmtBytes(row.memory_bytes)}`],
          ["submitted", fmtTime(row.submitted_ts)], ["waited", row.scheduled_ts ? fmtDuration(row.scheduled_ts - row.submitted_ts) : "still waiting"],
          ["exit code", row.exit_code ?? "–"], ["reason", row.reason || "–"]].flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v ?? "–" })])),
      state.me && state.me.operator && ["PENDING", "HELD", "SCHEDULED", "RUNNING"].includes(row.state)
        ? el("p", {}, el("button", { class: "danger", "data-action": "cancel", onclick: () => action("cancel", { job_id: row.job_id }, `Cancel ${row.job_id}?`), text: "cancel job" })) : null),
      el("div", { class: "card grow" }, el("h2", { text: "Audit" }), el("div", { id: "audit", class: "muted", text: "replaying the log…" }))),
    el("div", { class: "card" }, el("h2", { text: "Timeline (from the log)" }), timeline),
    el("div", { class: "card" }, el("h2", { text: "Attempts" }), attempts),
    el("div", { class: "card" }, el("h2", { text: `Output (tail of stdout${out.node ? " on " + out.node : ""})` }),
      out.text ? el("pre", { class: "output", id: "output", text: out.text }) : el("p", { class: "muted", text: out.note || "(empty)" })));
  const output = $("#output");
  if (output) output.scrollTop = output.scrollHeight; // the tail's end in sight
  const audit = await api(`/api/audit?id=${encodeURIComponent(id)}`);
  if (state.job !== id) return;
  const box = $("#audit");
  if (!audit.ok) { box.textContent = audit.body.error; return; }
  const a = audit.body;
  box.textContent = `${a.decisions} decisions about this job replayed from their basis_seq: ${a.reproduced} reproduced, ${a.mismatches} not (policy ${a.config.policy}, backfill ${a.config.backfill_mode}; ${fmtNum(a.records)} records replayed)`;
  box.className = a.mismatches ? "error" : "";
  for (const li of timeline.querySelectorAll("li")) {
    const v = a.verdicts[li.dataset.seq];
    if (!v) continue;
    const ok = v === "reproduced";
    const bad = v.startsWith("NOT");
    li.querySelector(".verdict-slot").append(el("span", { class: `verdict ${ok ? "ok" : bad ? "bad" : ""}`, "data-verdict": v, text: v }));
  }
}

// ------------------------------------------------------------------ charts

function renderCharts(snap) {
  const s = snap.series || {};
  const opts = { from: s.from, to: s.to };
  const decisions = [...(s.decisions || [])];
  while (decisions.length > 1 && decisions[0][1] === 0 && decisions[1][1] === 0) decisions.shift(); // before any
  drawChart($("#chart-decisions"), [{ name: "decisions/s", color: "#5aa9e6", points: decisions, bars: true, width: s.bucket_s }], opts);
  drawChart($("#chart-queue"), [{ name: "pending", color: "#d9a441", points: s.queue || [] }], { ...opts, yFormat: (v) => fmtNum(v, 1) });
  const w = s.wait || [];
  drawChart($("#chart-wait"), [
    { name: "p50", color: "#3fa46a", points: w.map((r) => [r[0], r[1]]) },
    { name: "p90", color: "#d9a441", points: w.map((r) => [r[0], r[2]]) },
    { name: "p99", color: "#d9534f", points: w.map((r) => [r[0], r[3]]) }], { ...opts, yFormat: (v) => fmtDuration(v) });
  drawChart($("#chart-util"), [{ name: "GPUs busy", color: "#3fa46a", points: s.utilisation || [] }], { ...opts, yMax: 1, yFormat: (v) => `${Math.round(v * 100)}%` });
}

// ------------------------------------------------------------------ routing and the stream

// ------------------------------------------------------------------ what if (docs/whatif.md)

const WHATIF_ROWS = [
  ["mean wait", (m) => fmtDuration(m.mean_wait_s)],
  ["p50 / p90 / p99 wait", (m) => ["p50", "p90", "p99"].map((p) => fmtDuration(m[`${p}_wait_s`])).join(" / ")],
  // a job that never starts waits until its user's cancel or the span's end: it is in the waits, and counted here
  ["jobs never started", (m) => fmtNum(m.never_started)],
  ["mean bounded slowdown", (m) => fmtNum(m.mean_bounded_slowdown, 2)],
  ["utilisation", (m) => `${fmtNum(m.utilization, 3)} (${m.utilization_of || "GPUs"})`],
  ["GPU-hours lost to preemption", (m) => fmtNum(m.gpu_hours_lost_to_preemption, 1)],
  ["fair-share distance", (m) => fmtNum((m.fairshare || {}).distance, 3)],
];
function whatifBars(rows) {
  // mean wait per tenant, baseline beside changed: one pair of horizontal bars each
  const W = 900, row = 34, L = 120, R = 110, H = rows.length * row + 8;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "bars" });
  const top = Math.max(1, ...rows.flatMap((r) => [r.base, r.changed]));
  rows.forEach((r, i) => {
    const y = 4 + i * row;
    const label = svg("text", { x: L - 6, y: y + 18, "text-anchor": "end", class: "axis" });
    label.textContent = r.name;
    root.append(label);
    [[r.base, "#5b8def", 0], [r.changed, "#e0a83a", 14]].forEach(([v, color, dy]) => {
      root.append(svg("rect", { x: L, y: y + dy, width: Math.max(1, ((W - L - R) * v) / top), height: 12, fill: color }));
      const t = svg("text", { x: L + ((W - L - R) * v) / top + 4, y: y + dy + 10, class: "axis" });
      t.textContent = fmtDuration(v);
      root.append(t);
    });
  });
  return root;
}
function renderWhatif(run) {
  const body = $("#whatif-body");
  body.textContent = "";
  const status = $("#whatif-status");
  const busy = run.state === "running";
  $("#whatif-run").disabled = busy;
  if (run.state === "idle") { status.textContent = "no what-if run yet"; return; }
  if (busy) {
    const parts = Object.entries(run.progress || {}).map(([k, [done, total]]) => `${k} ${fmtNum(done)}${total ? " / " + fmtNum(total) : ""}`);
    status.textContent = `running: ${parts.join(" · ") || "starting"}`;
    return;
  }
  if (run.state === "failed") { status.textContent = `failed: ${run.error}`; return; }
  const { baseline, changed } = run.result;
  const fid = baseline.fidelity || {};
  const span = baseline.span || {};
  const changes = changed.changes || [];
  status.textContent = `done in ${fmtDuration(run.finished - run.started)} · changes: ${changes.join("; ") || "none"}`;
  // every change the run was asked for, one a line: keys set, configuration events, nodes added and removed
  body.append(el("div", { class: "card" },
    el("h2", { text: `Changes (${changes.length})` }),
    changes.length ? el("ul", { id: "whatif-changes" }, changes.map((c) => el("li", {}, el("code", { text: c }))))
      : el("p", { id: "whatif-changes", class: "muted", text: "none: the changed run is the baseline" }),
    el("p", { class: "muted", id: "whatif-span", text: `span ${span.from || "?"} .. ${span.to || "?"}: ${fmtNum(span.jobs)} jobs` +
      (span.rejected ? `, ${fmtNum(span.rejected)} rejected at submission (not replayed)` : "") })));
  body.append(el("div", { class: "card" },
    el("h2", { text: "Baseline against what happened" }),
    el("p", { id: "whatif-fidelity", text: `reproduces ${fmtNum(fid.reproduced)} of ${fmtNum(fid.compared)} recorded starts` +
      ` (within ${fmtNum(fid.tolerance_s, 1)} s, same nodes)` + (fid.diverged ? `; ${fmtNum(fid.diverged)} differ` +
      (fid.on_time_elsewhere ? ` (${fmtNum(fid.on_time_elsewhere)} on time on other nodes: the live services' latency)` : "") +
      `, ${fmtNum(fid.unexplained)} without a known cause` : "") })));
  const table = el("table", { class: "grid", id: "whatif-table" },
    el("thead", {}, el("tr", {}, el("th", { text: "" }), el("th", { text: "baseline" }), el("th", { text: "changed" }))),
    el("tbody", {}, WHATIF_ROWS.map(([name, f]) => el("tr", {}, el("td", { text: name }), el("td", { text: f(baseline) }), el("td", { text: f(changed) })))));
  body.append(el("div", { class: "card" }, el("h2", { text: "Side by side" }), table));
  const byTenant = (m) => Object.fromEntries((m.per_tenant || []).map((r) => [r.tenant, r]));
  const b = byTenant(baseline), ch = byTenant(changed);
  const names = Object.keys(b).sort();
  const rows = names.map((n) => ({ name: n, base: b[n].mean_wait_s || 0, changed: (ch[n] || {}).mean_wait_s || 0 }));
  body.append(el("div", { class: "card" }, el("h2", { text: "Mean wait per tenant (blue: baseline, amber: changed)" }),
    el("div", { id: "whatif-tenants" }, whatifBars(rows))));
  const moves = changed.vs_baseline;
  if (moves) {
    body.append(el("p", { class: "muted", id: "whatif-moves", text: `jobs starting earlier: ${fmtNum(moves.earlier.jobs)} ` +
      `(mean ${fmtDuration(moves.earlier.mean_s)}), later: ${fmtNum(moves.later.jobs)} (mean ${fmtDuration(moves.later.mean_s)}), ` +
      `unchanged: ${fmtNum(moves.same)}` }));
  }
}
async function loadWhatif() {
  if (!state.me || !state.me.operator) {
    $("#whatif-status").textContent = "what-if replays the whole log: it is for operators";
    $("#whatif-form").hidden = true;
    return;
  }
  const { ok, body } = await api("/api/whatif");
  if (!ok) { $("#whatif-status").textContent = body.error; return; }
  state.whatif = body;
  renderWhatif(body);
  if (body.state === "running" && state.view === "whatif") setTimeout(loadWhatif, 1000);
}
async function runWhatif() {
  const lines = (id, sep) => $(id).value.split(sep).map((x) => x.trim()).filter(Boolean);
  const payload = { set: lines("#whatif-set", /\n/), from: $("#whatif-from").value, to: $("#whatif-to").value,
    add_nodes: lines("#whatif-add", /[\n,\s]+/), remove_nodes: lines("#whatif-remove", /[\n\s]+/) };
  const { ok, body } = await api("/api/whatif", {
    method: "POST", headers: { "Content-Type": "application/json", "X-Horizon-CSRF": state.me.csrf }, body: JSON.stringify(payload),
  });
  if (!ok) { $("#whatif-status").textContent = `refused: ${body.error}`; return; }
  loadWhatif();
}

function render() {
  const snap = state.snap;
  if (!snap) return;
  if (snap.error) { $("#status").textContent = snap.error; return; }
  // every view is kept current (hidden ones too): switching tabs shows the latest at once
  renderCluster(snap);
  renderQueue(snap);
  renderFairshare(snap);
  renderCharts(snap);
  $("#status").textContent = `log seq ${snap.seq} · updated ${new Date(snap.at * 1000).toLocaleTimeString([], { hour12: false })}`;
}
function route() {
  const hash = decodeURIComponent(location.hash.slice(1)) || "cluster";
  const [view, ...rest] = hash.split("/");
  state.view = ["cluster", "queue", "fairshare", "job", "charts", "whatif"].includes(view) ? view : "cluster";
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === state.view);
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== `view-${state.view}`;
  if (state.view === "job" && rest.length && rest.join("/") !== state.job) loadJob(rest.join("/"));
  if (state.view === "whatif") loadWhatif();
  render();
}
function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("snapshot", (ev) => {
    state.snap = JSON.parse(ev.data);
    state.receivedAt = Date.now();
    $("#live").classList.add("on");
    render();
    document.dispatchEvent(new CustomEvent("horizon:snapshot"));
  });
  source.onerror = () => { $("#live").classList.remove("on"); };
  source.onopen = () => { $("#live").classList.add("on"); };
}
async function login(form) {
  const res = await fetch("/login", { method: "POST", body: new URLSearchParams(new FormData(form)), credentials: "same-origin" });
  if (res.ok && !res.headers.get("content-type")?.includes("json")) { location.reload(); return; }
  let msg = `${res.status}`;
  try { msg = (await res.json()).error; } catch (e) { /* not JSON */ }
  $("#login-error").textContent = msg;
}
async function main() {
  for (const id of ["tenant", "account", "partition", "state"]) {
    $(`#f-${id}`).addEventListener("change", (ev) => { state.filters[id] = ev.target.value; render(); });
  }
  $("#job-form").addEventListener("submit", (ev) => { ev.preventDefault(); const id = $("#job-id").value.trim(); if (id) { state.job = null; location.hash = `#job/${encodeURIComponent(id)}`; } });
  $("#whatif-form").addEventListener("submit", (ev) => { ev.preventDefault(); runWhatif(); });
  $("#token-form").addEventListener("submit", (ev) => { ev.preventDefault(); login(ev.target); });
  $("#tenant-form").addEventListener("submit", (ev) => { ev.preventDefault(); login(ev.target); });
  $("#logout").addEventListener("click", async () => { await fetch("/logout", { method: "POST" }); location.reload(); });
  window.addEventListener("hashchange", route);
  const me = await api("/api/me");
  if (me.status === 401) {
    $("#login").hidden = false;
    $("#tenant-form").hidden = !me.body.tenants;
    $("#tabs").hidden = true;
    $("#status").textContent = "log in to see the cluster";
    return;
  }
  state.me = me.body;
  $("#identity").textContent = state.me.operator ? "operator" : `tenant ${state.me.tenant}`;
  $("#logout").hidden = !state.me.login;
  route();
  connect();
}
main();
