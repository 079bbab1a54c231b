// Ember dashboard: one page per hash route (#/overview, #/jobs, #/jobs/ID, #/actors,
// #/placement-groups, #/serve, #/logs, #/metrics, #/traces, #/traces/ID), rendered from the
// dashboard's JSON APIs and refreshed every few seconds. Plain DOM, no libraries.
"use strict";

const REFRESH_MS = 3000;
let timer = null;
const charts = {};  // metric series key -> [[t, value], ...] (the metrics page's history)

function esc(v) {
  return String(v === null || v === undefined ? "-" : v)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function st(s) { return `<span class="state-${esc(s)}">${esc(s)}</span>`; }
function mib(b) { return (b / 1048576).toFixed(1) + " MiB"; }
function when(ms) { return ms ? new Date(ms).toLocaleString() : "-"; }
function res(r) { return Object.keys(r || {}).sort().map(k => k === "memory" ? `memory ${(r[k] / 2 ** 30).toFixed(1)} GiB` : `${k} ${r[k]}`).join(", "); }
async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}
async function listState(resource, extra) {
  const d = await getJSON(`/api/v0/${resource}?limit=10000&detail=true${extra || ""}`);
  return d.data.result.result;
}
function table(id, headers, rows) {
  return `<table id="${id}"><thead><tr>${headers.map(h => `<th>${esc(h)}</th>`).join("")}</tr></thead>` +
    `<tbody>${rows.join("") || `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`}</tbody></table>`;
}
let lastHtml = null;
// Unchanged pages are not re-rendered (what the user selected or typed stays, nothing flickers).
function setPage(html) { if (html !== lastHtml) { lastHtml = html; document.getElementById("page").innerHTML = html; } }
function setWrap(wrap, html) { if (wrap.dataset.html !== html) { wrap.dataset.html = html; wrap.innerHTML = html; } }
function stamp() { document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(); }

// ------------------------------------------------------------------ overview
async function overview() {
  const c = await getJSON("/api/cluster");
  const cpuT = c.resources_total.CPU || 0, cpuA = c.resources_available.CPU || 0;
  const cards = [
    ["nodes-alive", c.alive, "alive nodes" + (c.dead ? ` (${c.dead} dead)` : "")],
    ["cpu-use", `${(cpuT - cpuA).toFixed(1)} / ${cpuT}`, "CPUs in use"],
    ["gpu-use", `${((c.resources_total.GPU || 0) - (c.resources_available.GPU || 0)).toFixed(1)} / ${c.resources_total.GPU || 0}`, "GPUs in use"],
    ["store-use", `${mib(c.object_store_used)} / ${mib(c.object_store_capacity)}`, "object store"],
  ].map(([id, v, l]) => `<div class="card" id="${id}"><div class="value">${esc(v)}</div><div class="label">${esc(l)}</div></div>`);
  const rows = c.nodes.map(n => {
    const s = n.object_store || {used_bytes: 0, capacity_bytes: 0, num_objects: 0};
    const pct = s.capacity_bytes ? 100 * s.used_bytes / s.capacity_bytes : 0;
    const used = {};
    for (const k of Object.keys(n.resources_total)) used[k] = +(n.resources_total[k] - ((n.resources_available || {})[k] || 0)).toFixed(2);
    return `<tr data-id="${esc(n.node_id)}"><td class="mono">${esc(n.node_id)}</td><td>${esc(n.node_ip)}</td>` +
      `<td>${n.is_head_node ? "head" : ""}</td><td>${st(n.state)}</td><td>${esc(res(n.resources_total))}</td>` +
      `<td>${esc(res(used))}</td><td><div class="bar-bg"><div class="bar" style="width:${pct.toFixed(1)}%"></div></div>` +
      `${mib(s.used_bytes)} / ${mib(s.capacity_bytes)}, ${s.num_objects} objects</td></tr>`;
  });
  setPage(`<h2>Cluster</h2><p class="muted">GCS ${esc(c.gcs_address)}</p><div class="cards">${cards.join("")}</div>` +
    table("nodes-table", ["Node", "IP", "Role", "State", "Resources", "In use", "Object store"], rows));
}

// ------------------------------------------------------------------ jobs
async function jobs() {
  const list = await getJSON("/api/jobs/");
  list.sort((a, b) => (b.start_time || 0) - (a.start_time || 0));
  const rows = list.map(j => {
    const id = j.submission_id || j.job_id;
    return `<tr data-id="${esc(id)}"><td class="mono"><a href="#/jobs/${encodeURIComponent(id)}">${esc(id)}</a></td>` +
      `<td>${esc(j.type)}</td><td class="job-status">${st(j.status)}</td><td class="mono">${esc(j.entrypoint)}</td>` +
      `<td>${when(j.start_time)}</td><td>${when(j.end_time)}</td></tr>`;
  });
  const tbl = table("jobs-table", ["Submission / job id", "Type", "Status", "Entrypoint", "Started", "Ended"], rows);
  const wrap = document.getElementById("jobs-table-wrap");
  if (wrap) { setWrap(wrap, tbl); return; }  // a refresh: leave the form as the user left it
  setPage(`<h2>Jobs</h2><form class="submit" id="submit-form"><b>Submit a job</b><br>
    <input type="text" id="submit-entrypoint" placeholder="python -c &quot;print('hello')&quot;">
    <input type="text" id="submit-id" placeholder="submission id (optional)" style="width:16em">
    <button type="submit" id="submit-button">Submit</button> <span id="submit-result"></span></form>` +
    `<div id="jobs-table-wrap">${tbl}</div>`);
  document.getElementById("submit-form").onsubmit = async (e) => {
    e.preventDefault();
    const body = {entrypoint: document.getElementById("submit-entrypoint").value};
    const sid = document.getElementById("submit-id").value;
    if (sid) body.submission_id = sid;
    const r = await fetch("/api/jobs/", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
    const out = document.getElementById("submit-result");
    if (r.ok) { const j = await r.json(); location.hash = `#/jobs/${encodeURIComponent(j.submission_id)}`; }
    else { out.className = "error"; out.textContent = await r.text(); }
  };
}

async function job(id) {
  const j = await getJSON(`/api/jobs/${encodeURIComponent(id)}`);
  let logs = "";
  if (j.type === "SUBMISSION") logs = (await getJSON(`/api/jobs/${encodeURIComponent(id)}/logs`)).logs;
  const since = j.start_time || 0, until = j.end_time || Date.now();
  const info = [["Status", st(j.status)], ["Message", esc(j.message)], ["Entrypoint", `<span class="mono">${esc(j.entrypoint)}</span>`],
    ["Type", esc(j.type)], ["Started", when(j.start_time)], ["Ended", when(j.end_time)], ["Exit code", esc(j.driver_exit_code)],
    ["Node", `<span class="mono">${esc(j.driver_node_id)}</span>`], ["Metadata", esc(JSON.stringify(j.metadata || {}))],
    ["Runtime env", esc(JSON.stringify(j.runtime_env || {}))]];
  setPage(`<h2>Job <span class="mono" id="job-id">${esc(id)}</span></h2>` +
    `<table id="job-info">${info.map(([k, v]) => `<tr><th>${k}</th><td id="job-${k.toLowerCase().replace(/ /g, "-")}">${v}</td></tr>`).join("")}</table>` +
    `<p><button id="job-stop">Stop</button> <button id="job-delete">Delete</button> ` +
    `<a id="job-traces" href="#/traces?since_ms=${since}&until_ms=${until}">Traces during this job</a> <span id="job-action"></span></p>` +
    `<h3>Logs</h3><pre class="log" id="job-logs">${esc(logs)}</pre>`);
  const act = async (method, path) => {
    const r = await fetch(`/api/jobs/${encodeURIComponent(id)}${path}`, {method});
    document.getElementById("job-action").textContent = r.ok ? JSON.stringify(await r.json()) : await r.text();
  };
  document.getElementById("job-stop").onclick = () => act("POST", "/stop");
  document.getElementById("job-delete").onclick = async () => { await act("DELETE", ""); location.hash = "#/jobs"; };
}

// ------------------------------------------------------------------ actors, placement groups
async function actors() {
  const list = await listState("actors");
  const counts = {};
  for (const a of list) counts[a.state] = (counts[a.state] || 0) + 1;
  const rows = list.map(a => `<tr data-id="${esc(a.actor_id)}"><td class="mono">${esc(a.actor_id)}</td><td class="actor-class">${esc(a.class_name)}</td>` +
    `<td class="actor-name">${esc(a.name || "")}</td><td>${esc(a.ray_namespace)}</td><td class="actor-state">${st(a.state)}</td>` +
    `<td class="mono">${esc((a.node_id || "").slice(0, 12))}</td><td>${esc(a.pid)}</td><td>${esc(a.num_restarts)}</td>` +
    `<td>${esc(a.death_cause ? a.death_cause.error_message.split("\n")[0] : "")}</td></tr>`);
  setPage(`<h2>Actors</h2><p id="actor-counts">${Object.keys(counts).sort().map(k => `${st(k)} ${counts[k]}`).join(" &nbsp; ") || "no actors"}</p>` +
    table("actors-table", ["Actor id", "Class", "Name", "Namespace", "State", "Node", "PID", "Restarts", "Death cause"], rows));
}

async function placementGroups() {
  const list = await listState("placement_groups");
  const rows = list.map(g => `<tr data-id="${esc(g.placement_group_id)}"><td class="mono">${esc(g.placement_group_id)}</td>` +
    `<td>${esc(g.name)}</td><td>${st(g.state)}</td><td>${esc(g.strategy)}</td><td>${g.is_detached ? "detached" : "job"}</td>` +
    `<td>${(g.bundles || []).map(b => `${b.bundle_id}: ${esc(res(b.unit_resources))} @ <span class="mono">${esc((b.node_id || "-").slice(0, 8))}</span>`).join("<br>")}</td>` +
    `<td>${esc(g.state_message || "")}</td></tr>`);
  setPage(`<h2>Placement groups</h2>` + table("pgs-table", ["Id", "Name", "State", "Strategy", "Lifetime", "Bundles", "Why"], rows));
}

// ------------------------------------------------------------------ serve
async function serve() {
  const s = await getJSON("/api/serve/overview");
  const apps = Object.entries(s.applications).map(([name, a]) => {
    const deps = Object.values(a.deployments).map(d => `${esc(d.name)}: ${st(d.status)} ` +
      Object.entries(d.replica_states).map(([k, v]) => `${esc(k)}×${v}`).join(", ")).join("<br>");
    return `<tr data-id="${esc(name)}"><td class="app-name">${esc(name)}</td><td>${st(a.status)}</td>` +
      `<td class="app-route mono">${esc(a.route_prefix)}</td><td>${deps}</td><td>${esc(a.message)}</td></tr>`;
  });
  const reps = s.actors.map(a => `<tr data-id="${esc(a.actor_id)}"><td>${esc(a.name)}</td><td>${esc(a.class_name)}</td>` +
    `<td>${st(a.state)}</td><td class="mono">${esc((a.node_id || "").slice(0, 12))}</td><td>${esc(a.pid)}</td></tr>`);
  setPage(`<h2>Serve applications</h2>` + table("serve-apps", ["Application", "Status", "Route", "Deployments (replicas)", "Message"], apps) +
    `<h3>Proxies</h3><p id="serve-proxies" class="mono">${s.proxies.map(esc).join(", ") || "none"}</p>` +
    `<h3>Controller and replicas</h3>` + table("serve-replicas", ["Name", "Class", "State", "Node", "PID"], reps));
}

// ------------------------------------------------------------------ logs
let currentLog = null;  // {node, name}
async function logs() {
  const d = await getJSON("/api/logs");
  const rows = [];
  for (const n of d.nodes) {
    const node = `<td class="mono">${esc(n.node_id.slice(0, 12))}${n.is_head ? " (head)" : ""}</td><td>${esc(n.node_ip)}</td>`;
    if (n.error) rows.push(`<tr data-id="${esc(n.node_id)}">${node}<td colspan="3" class="error">${esc(n.error)}</td></tr>`);
    for (const f of n.files) {
      rows.push(`<tr data-id="${esc(n.node_id)}/${esc(f.name)}">${node}<td><a href="#/logs" class="log-link" data-node="${esc(n.node_id)}" data-name="${esc(f.name)}">${esc(f.name)}</a></td>` +
        `<td>${f.size}</td><td>${new Date(f.mtime * 1000).toLocaleTimeString()}</td></tr>`);
    }
  }
  let body = "";
  if (currentLog) {
    const r = await fetch(`/api/logs/file?node_id=${encodeURIComponent(currentLog.node)}&name=${encodeURIComponent(currentLog.name)}&lines=500`);
    body = `<h3 id="log-name">${esc(currentLog.name)} <span class="muted mono">node ${esc(currentLog.node.slice(0, 12))}</span></h3><pre class="log" id="log-text">${esc(await r.text())}</pre>`;
  }
  setPage(`<h2>Logs</h2><p class="muted">every node's log directory, read through its raylet</p>` + body +
    table("logs-table", ["Node", "IP", "File", "Bytes", "Modified"], rows));
  for (const a of document.querySelectorAll("a.log-link")) a.onclick = (e) => { e.preventDefault(); currentLog = {node: a.dataset.node, name: a.dataset.name}; route(); };
}

// ------------------------------------------------------------------ metrics
let metricTarget = null;
const DEFAULT_SERIES = ["ember_tasks_running", "ember_object_store_used_bytes", "ember_workers", "ember_node_cpu"];
async function metrics() {
  const targets = await getJSON("/api/metrics/targets");
  const names = Object.keys(targets).sort();
  if (!names.length) { setPage(`<h2>Metrics</h2><p id="metrics-none">No Prometheus endpoints registered (start the cluster with --metrics-export-port).</p>`); return; }
  if (!metricTarget || !targets[metricTarget]) metricTarget = names.find(n => n.startsWith("raylet")) || names[0];
  const samples = await getJSON(`/api/metrics/scrape?target=${encodeURIComponent(metricTarget)}`);
  const now = Date.now();
  for (const s of samples) {
    const key = metricTarget + "|" + s.name + JSON.stringify(s.labels);
    (charts[key] = charts[key] || []).push([now, s.value]);
    if (charts[key].length > 120) charts[key].shift();
  }
  const shown = samples.filter(s => DEFAULT_SERIES.some(p => s.name.startsWith(p)) || s.name.includes("object_store") || s.name.includes("tasks")).slice(0, 8);
  setPage(`<h2>Metrics</h2><p>Endpoint <select id="metric-target">${names.map(n => `<option ${n === metricTarget ? "selected" : ""}>${esc(n)}</option>`).join("")}</select>
    <span class="mono muted">${esc(targets[metricTarget])}</span></p><div id="charts">` +
    shown.map((s, i) => `<canvas class="chart" id="chart-${i}" width="360" height="150" data-key="${esc(metricTarget + "|" + s.name + JSON.stringify(s.labels))}" title="${esc(s.name + (Object.keys(s.labels).length ? " " + Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(",") : ""))}"></canvas>`).join("") +
    `</div>` + table("metrics-table", ["Metric", "Labels", "Value"], samples.slice(0, 300).map(s =>
      `<tr><td class="mono">${esc(s.name)}</td><td class="mono">${esc(JSON.stringify(s.labels))}</td><td>${s.value}</td></tr>`)));
  document.getElementById("metric-target").onchange = (e) => { metricTarget = e.target.value; route(); };
  for (const c of document.querySelectorAll("canvas.chart")) draw(c, charts[c.dataset.key] || [], c.title);
}
function draw(canvas, pts, title) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  g.clearRect(0, 0, w, h);
  g.fillStyle = "#222"; g.font = "11px sans-serif"; g.fillText(title.slice(0, 55), 6, 12);
  if (!pts.length) return;
  const vs = pts.map(p => p[1]), lo = Math.min(...vs), hi = Math.max(...vs), span = hi - lo || 1;
  const t0 = pts[0][0], t1 = pts[pts.length - 1][0], ts = t1 - t0 || 1;
  g.fillText(`${hi.toPrecision(4)}`, 6, 26); g.fillText(`${lo.toPrecision(4)}`, 6, h - 4);
  g.strokeStyle = "#3d7eff"; g.lineWidth = 2; g.beginPath();
  pts.forEach(([t, v], i) => { const x = 50 + (w - 60) * (t - t0) / ts, y = h - 12 - (h - 40) * (v - lo) / span; i ? g.lineTo(x, y) : g.moveTo(x, y); });
  g.stroke();
}

// ------------------------------------------------------------------ traces
async function traces(query) {
  const params = new URLSearchParams(query || "");
  const search = document.getElementById("trace-search");
  if (search && search.value) params.set("contains", search.value);
  const d = await getJSON(`/api/traces?${params}`);
  if (!d.dir) { setPage(`<h2>Traces</h2><p id="traces-none">No span directory: run the cluster with OTEL_TRACES_EXPORTER=ember_file and EMBER_TRACE_DIR=DIR (the dashboard reads DIR).</p>`); return; }
  const rows = d.traces.map(t => `<tr data-id="${esc(t.trace_id)}"><td class="mono"><a class="trace-link" href="#/traces/${esc(t.trace_id)}">${esc(t.trace_id)}</a></td>` +
    `<td>${esc(t.root)}</td><td>${esc(t.services.join(", "))}</td><td>${t.spans}</td><td>${t.duration_ms.toFixed(2)} ms</td>` +
    `<td>${new Date(t.start_ns / 1e6).toLocaleTimeString()}</td><td>${t.error ? st("FAILED") : ""}</td></tr>`);
  const tbl = table("traces-table", ["Trace", "Root span", "Services", "Spans", "Duration", "Started", ""], rows);
  const wrap = document.getElementById("traces-table-wrap");
  if (wrap && search) { setWrap(wrap, tbl); return; }  // a refresh: leave the search box alone
  setPage(`<h2>Traces</h2><p><input id="trace-search" placeholder="span or service contains…" value="${esc(params.get("contains") || "")}">` +
    ` <span class="muted">${esc(d.dir)}</span></p><div id="traces-table-wrap">${tbl}</div>`);
  document.getElementById("trace-search").onchange = () => route();
}

async function traceView(id) {
  const d = await getJSON(`/api/traces/${encodeURIComponent(id)}`);
  const total = Math.max(...d.spans.map(s => s.offset_ms + s.duration_ms), 0.001);
  const rows = d.spans.map(s => `<tr data-id="${esc(s.span_id)}"><td class="name" style="padding-left:${0.6 + s.depth * 1.2}em">${esc(s.name)}</td>` +
    `<td class="span-service">${esc(s.service)}</td><td>${s.duration_ms.toFixed(3)} ms</td>` +
    `<td><div class="wf-track"><div class="wf-span${s.status === "ERROR" ? " err" : ""}" title="${esc(s.error || JSON.stringify(s.attributes))}" ` +
    `style="left:${(100 * s.offset_ms / total).toFixed(3)}%;width:${(100 * s.duration_ms / total).toFixed(3)}%"></div></div></td></tr>`);
  const services = [...new Set(d.spans.map(s => s.service))];
  setPage(`<h2>Trace <span class="mono" id="trace-id">${esc(id)}</span></h2><p id="trace-summary">${d.spans.length} spans across ${services.length} services (${esc(services.join(", "))}), ${total.toFixed(2)} ms</p>` +
    table("waterfall", ["Span", "Service", "Duration", "Timeline"], rows).replace("<table", '<table class="waterfall"'));
}

// ------------------------------------------------------------------ router
const PAGES = {overview, jobs, tasks: tasksPage, actors, "placement-groups": placementGroups, serve, logs, metrics, traces};
async function route() {
  clearTimeout(timer);
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const [page, id] = path.split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page);
  try {
    if (page === "jobs" && id) await job(id);
    else if (page === "traces" && id) await traceView(id);
    else if (page === "traces") await traces(query);
    else await (PAGES[page] || overview)();
    stamp();
  } catch (e) {
    setPage(`<p class="error" id="page-error">${esc(e.message)}</p>`);
  }
  const still = location.hash;
  // detail pages of finished things and the trace waterfall do not change: no refresh there
  if (!(page === "traces" && id)) timer = setTimeout(() => { if (location.hash === still) route(); }, REFRESH_MS);
}
window.addEventListener("hashchange", () => { currentLog = page() === "logs" ? currentLog : null; route(); });
function page() { return (location.hash.replace(/^#\/?/, "") || "overview").split(/[/?]/)[0]; }
route();
