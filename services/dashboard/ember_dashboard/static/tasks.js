// Ember dashboard: the tasks page (#/tasks, #/tasks/TASK_ID). Filters (job, state, name) go to
// /api/v0/tasks as Ray's filter_keys/predicates/values and are applied in the GCS; the
// timeline lays the listed attempts out on one lane per worker, from their RUNNING time to
// their end. Uses app.js's helpers (esc, st, getJSON, table, setPage, setWrap); app.js routes here.
"use strict";

const TASK_STATES = ["", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED", "FAILED"];
const TASKS_LIMIT = 1000, TIMELINE_MAX = 300;

function taskQuery() {
  const f = {job_id: "", state: "", name: ""};
  for (const k of Object.keys(f)) { const el = document.getElementById(`tasks-filter-${k.replace("_id", "")}`); if (el) f[k] = el.value.trim(); }
  const p = new URLSearchParams({limit: TASKS_LIMIT, detail: "true"});
  for (const [k, v] of Object.entries(f)) if (v) { p.append("filter_keys", k); p.append("filter_predicates", "="); p.append("filter_values", v); }
  return p;
}

function timeline(tasks) {
  const ran = tasks.filter(t => t.start_time_ms).slice(0, TIMELINE_MAX);
  if (!ran.length) return `<p class="muted" id="tasks-timeline">no task has started yet</p>`;
  const now = Date.now();
  const t0 = Math.min(...ran.map(t => t.start_time_ms)), t1 = Math.max(...ran.map(t => t.end_time_ms || now));
  const span = Math.max(t1 - t0, 1);
  const lanes = {};
  for (const t of ran) (lanes[`${(t.node_id || "").slice(0, 8)} pid ${t.worker_pid}`] = lanes[`${(t.node_id || "").slice(0, 8)} pid ${t.worker_pid}`] || []).push(t);
  const rows = Object.keys(lanes).sort().map(lane => `<tr><td class="mono name">${esc(lane)}</td><td><div class="wf-track">` +
    lanes[lane].map(t => {
      const left = 100 * (t.start_time_ms - t0) / span, width = 100 * ((t.end_time_ms || now) - t.start_time_ms) / span;
      return `<div class="wf-span task-bar${t.state === "FAILED" ? " err" : ""}" data-id="${esc(t.task_id)}" ` +
        `title="${esc(`${t.name} ${t.state} ${(t.end_time_ms || now) - t.start_time_ms} ms`)}" ` +
        `style="left:${left.toFixed(3)}%;width:${width.toFixed(3)}%"></div>`;
    }).join("") + `</div></td></tr>`);
  return `<table class="waterfall" id="tasks-timeline"><thead><tr><th>Worker</th><th>${esc(new Date(t0).toLocaleTimeString())} … ${span} ms</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

async function tasksPage() {
  const id = decodeURIComponent((location.hash.split("?")[0].split("/")[2] || ""));
  if (id) return taskView(id);
  if (!document.getElementById("tasks-filters")) {
    setPage(`<h2>Tasks</h2><form id="tasks-filters" class="submit">` +
      `<input id="tasks-filter-job" placeholder="job id" style="width:10em"> ` +
      `<select id="tasks-filter-state">${TASK_STATES.map(s => `<option value="${s}">${s || "any state"}</option>`).join("")}</select> ` +
      `<input id="tasks-filter-name" placeholder="function or Class.method" style="width:16em"> ` +
      `<button type="submit" id="tasks-apply">Filter</button></form><div id="tasks-body"></div>`);
    document.getElementById("tasks-filters").onsubmit = (e) => { e.preventDefault(); route(); };
  }
  const [list, sum] = await Promise.all([getJSON(`/api/v0/tasks?${taskQuery()}`), getJSON("/api/v0/tasks/summarize")]);
  const r = list.data.result, c = sum.data.result.node_id_to_summary.cluster;
  const counts = {};
  for (const e of Object.values(c.summary)) for (const [k, v] of Object.entries(e.state_counts)) counts[k] = (counts[k] || 0) + v;
  const rows = r.result.map(t => `<tr data-id="${esc(t.task_id)}"><td class="mono"><a href="#/tasks/${esc(t.task_id)}">${esc(t.task_id)}</a></td>` +
    `<td>${t.attempt_number}</td><td class="task-name">${esc(t.name)}</td><td class="task-state">${st(t.state)}</td><td>${esc(t.type)}</td>` +
    `<td class="mono">${esc(t.job_id)}</td><td class="mono">${esc((t.node_id || "").slice(0, 12))}</td><td>${esc(t.worker_pid)}</td>` +
    `<td>${t.start_time_ms && t.end_time_ms ? (t.end_time_ms - t.start_time_ms) + " ms" : "-"}</td><td>${esc(t.error_type || "")}</td></tr>`);
  setWrap(document.getElementById("tasks-body"),
    `<p id="tasks-summary">${c.total_tasks} tasks, ${c.total_actor_tasks} actor tasks, ${c.total_actor_scheduled} actors scheduled: ` +
    `${Object.keys(counts).sort().map(k => `${st(k)} ${counts[k]}`).join(" &nbsp; ") || "none yet"}` +
    `${c.num_dropped ? ` <span class="error">(${c.num_dropped} events dropped)</span>` : ""}</p>` +
    `<p class="muted" id="tasks-count">${r.num_after_truncation} of ${r.total} matching attempts, newest first</p>` +
    `<h3>Timeline</h3>${timeline(r.result)}` +
    table("tasks-table", ["Task id", "Attempt", "Name", "State", "Type", "Job", "Node", "PID", "Duration", "Error"], rows));
}

async function taskView(id) {
  const d = await getJSON(`/api/v0/tasks?limit=100&detail=true&filter_keys=task_id&filter_predicates=%3D&filter_values=${encodeURIComponent(id)}`);
  const attempts = d.data.result.result;
  if (!attempts.length) { setPage(`<h2>Task <span class="mono">${esc(id)}</span></h2><p class="error" id="task-missing">no such task</p>`); return; }
  const parts = attempts.map(t => {
    const info = [["Name", esc(t.name)], ["State", st(t.state)], ["Type", esc(t.type)], ["Job", esc(t.job_id)], ["Actor", esc(t.actor_id)],
      ["Node", esc(t.node_id)], ["Worker", `${esc(t.worker_id)} (pid ${esc(t.worker_pid)})`], ["Trace", t.trace_id ? `<a href="#/traces/${esc(t.trace_id)}">${esc(t.trace_id)}</a>` : "-"],
      ["Error", t.error_message ? `${esc(t.error_type)}<pre class="log">${esc(t.error_message)}</pre>` : "-"]];
    const ev = (t.events || []).map(e => `<tr><td>${st(e.state)}</td><td>${new Date(e.created_ms).toLocaleTimeString()}.${String(e.created_ms % 1000).padStart(3, "0")}</td></tr>`);
    return `<h3>Attempt ${t.attempt_number}</h3><table class="task-info">${info.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join("")}</table>` +
      table(`task-events-${t.attempt_number}`, ["State", "At"], ev);
  });
  setPage(`<h2>Task <span class="mono" id="task-id">${esc(id)}</span></h2><p><a href="#/tasks">all tasks</a></p>` + parts.join(""));
}
