// The load-test and tuning page: SLO form, load tests, and a tuning job watched once a second
// (progress, cancel, a table and a chart of throughput against latency per setting, apply).
import { escapeHtml, fmt } from "./dashboards/live.js";

const root = document.getElementById("tuning-root");
const { model, version, csrf } = root.dataset;
const api = `/api/models/${encodeURIComponent(model)}/versions/${version}/`;
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const COLORS = ["#2456c7", "#1f7a3d", "#b3261e", "#8a5a00", "#6b3fa0", "#0f7c8c", "#c2410c", "#475569"];
let slo = JSON.parse(root.dataset.slo || "null");
let watching = null;
let chart = null;

async function call(method, url, body) {
  const response = await fetch(url, {
    method,
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, Accept: "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.message || `HTTP ${response.status}`);
  return data;
}

function values(form) {
  const out = {};
  for (const [key, value] of new FormData(form).entries()) if (value !== "") out[key] = value;
  return out;
}

const numbers = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

function on(id, event, handler) {
  const el = document.getElementById(id);
  if (el) el.addEventListener(event, handler);
}

on("slo-form", "submit", async (event) => {
  event.preventDefault();
  const v = values(event.target);
  const status = document.getElementById("slo-status");
  try {
    slo = await call("PUT", `/api/models/${encodeURIComponent(model)}/slo/`, {
      percentile: Number(v.percentile), latency_ms: Number(v.latency_ms),
      max_error_rate: Number(v.max_error_rate || 0), expected_rate_per_s: Number(v.expected_rate_per_s || 0),
    });
    document.getElementById("slo-summary").textContent =
      `p${slo.percentile} ≤ ${slo.latency_ms} ms, error rate ≤ ${slo.max_error_rate}, expected ${slo.expected_rate_per_s} req/s`;
    status.textContent = "saved";
  } catch (error) { status.textContent = error.message; }
});

on("loadtest-form", "submit", async (event) => {
  event.preventDefault();
  const v = values(event.target);
  const status = document.getElementById("loadtest-status");
  try {
    const job = await call("POST", `${api}loadtests/`, {
      mode: v.mode, concurrency: Number(v.concurrency || 1), rate_per_s: Number(v.rate_per_s || 0),
      duration_s: Number(v.duration_s || 10),
    });
    status.textContent = `load test ${job.id} queued`;
    pollLoadTest(job.id, status);
  } catch (error) { status.textContent = error.message; }
});

async function pollLoadTest(id, status) {
  const job = await call("GET", `${api}loadtests/${id}/`);
  status.textContent = `load test ${id}: ${job.state}${job.message ? ` · ${job.message}` : ""}`;
  if (TERMINAL.has(job.state)) { window.location.reload(); return; }
  setTimeout(() => pollLoadTest(id, status), 1000);
}

on("tuning-form", "submit", async (event) => {
  event.preventDefault();
  const v = values(event.target);
  const body = { duration_s: Number(v.duration_s || 2), max_concurrency: Number(v.max_concurrency || 16) };
  if (v.slo_p95_ms) body.slo_p95_ms = Number(v.slo_p95_ms);
  if (v.rate_per_s) body.rate_per_s = Number(v.rate_per_s);
  if (v.instances) body.instances = numbers(v.instances).map(Number);
  if (v.batching) body.batching = numbers(v.batching);
  const status = document.getElementById("tuning-start-status");
  try {
    const job = await call("POST", `${api}tunings/`, body);
    status.textContent = "";
    watch(job.id);
  } catch (error) { status.textContent = error.message; }
});

on("tuning-cancel", "click", async () => {
  if (watching) await call("POST", `${api}tunings/${watching}/cancel/`).catch(() => {});
});

on("tuning-apply", "click", async (event) => {
  event.target.disabled = true;
  try {
    const created = await call("POST", `${api}tunings/${watching}/apply/`);
    showApplied(created.version);
    event.target.hidden = true;
  } catch (error) {
    event.target.disabled = false;
    document.getElementById("tuning-why").textContent += ` (${error.message})`;
  }
});

document.querySelectorAll("[data-watch-job]").forEach((link) => link.addEventListener("click", (event) => {
  event.preventDefault();
  watch(Number(link.dataset.watchJob));
}));

function showApplied(number) {
  const applied = document.getElementById("tuning-applied");
  const url = `/models/${encodeURIComponent(model)}/versions/${number}/`;
  applied.innerHTML = `Created <a href="${url}" id="tuning-applied-link">${escapeHtml(model)} v${number}</a>: it is being validated like any new version, then it can be promoted.`;
  applied.hidden = false;
}

function watch(id) {
  watching = id;
  if (chart) { chart.destroy(); chart = null; }
  document.getElementById("tuning-job").hidden = false;
  poll(id);
}

async function poll(id) {
  if (watching !== id) return;
  let job;
  try { job = await call("GET", `${api}tunings/${id}/`); } catch (error) {
    document.getElementById("tuning-message").textContent = error.message;
    setTimeout(() => poll(id), 2000);
    return;
  }
  render(job);
  if (!TERMINAL.has(job.state)) setTimeout(() => poll(id), 1000);
}

function render(job) {
  document.getElementById("tuning-id").textContent = job.id;
  const state = document.getElementById("tuning-state");
  state.textContent = job.state;
  state.className = `badge ${job.state}`;
  document.getElementById("tuning-progress").value = job.progress;
  document.getElementById("tuning-message").textContent =
    `${Math.round(job.progress * 100)} % · ${job.message || ""} · SLO p${job.slo.percentile} ≤ ${job.slo.latency_ms} ms${job.slo.expected_rate_per_s ? ` at ${job.slo.expected_rate_per_s} req/s` : ""}`;
  const cancel = document.getElementById("tuning-cancel");
  if (cancel) cancel.hidden = TERMINAL.has(job.state) || !root.hasAttribute("data-can-deploy");
  const error = document.getElementById("tuning-error");
  error.hidden = !job.error;
  error.textContent = job.error;
  renderTable(job);
  renderChart(job);
  renderRecommendation(job);
  root.dataset.tuningState = job.state;
}

function renderTable(job) {
  const best = job.recommendation && job.recommendation.setting ? job.recommendation.setting.label : null;
  document.querySelector("#tuning-table tbody").innerHTML = job.results.map((r) => {
    const knee = r.knee ? `c${r.knee.concurrency}: ${fmt(r.knee.throughput_per_s, 0)}/s` : "–";
    const mark = r.setting.label === best ? " class=\"recommended\"" : "";
    return `<tr${mark}><td>${escapeHtml(r.setting.label)}</td><td class="num">${fmt(r.p50_ms, 2)}</td>`
      + `<td class="num">${fmt(r.p95_ms, 2)}</td><td class="num">${fmt(r.p99_ms, 2)}</td>`
      + `<td class="num">${fmt(r.throughput_per_s, 0)}</td><td class="num">${fmt(r.queue_ms, 3)}</td>`
      + `<td class="num">${fmt(r.compute_infer_ms, 3)}</td><td>${knee}</td>`
      + `<td class="num">${fmt(r.capacity_per_s, 0)}</td>`
      + `<td><span class="badge ${r.meets_slo ? "ok" : "bad"}">${r.meets_slo ? "meets" : "misses"}</span></td>`
      + `<td class="small">${escapeHtml(r.generator || "built-in")}</td></tr>`;
  }).join("");
}

function renderRecommendation(job) {
  const box = document.getElementById("tuning-recommendation");
  const rec = job.recommendation || {};
  box.hidden = job.state !== "succeeded";
  document.getElementById("tuning-why").textContent = rec.why || "";
  const apply = document.getElementById("tuning-apply");
  if (job.applied_version) showApplied(job.applied_version);
  if (apply) apply.hidden = !rec.setting || Boolean(job.applied_version) || !root.hasAttribute("data-can-deploy");
}

// Throughput (x) against the SLO's latency percentile (y): one line per setting through its
// concurrency points, the expected-rate point included, and the SLO target as a dashed line.
function renderChart(job) {
  if (!job.results.length || !window.uPlot) return;
  const pick = job.slo.percentile === 99 ? "p99_ms" : "p95_ms";
  const tables = job.results.map((r) => {
    const points = [...r.curve, ...(r.at_rate ? [r.at_rate] : [])]
      .map((p) => [p.throughput_per_s, p[pick]]).sort((a, b) => a[0] - b[0]);
    return [points.map((p) => p[0]), points.map((p) => p[1])];
  });
  const data = uPlot.join(tables);
  data.push(data[0].map(() => job.slo.latency_ms));
  const series = [
    { label: "req/s" },
    ...job.results.map((r, i) => ({
      label: r.setting.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
      points: { show: true, size: 6 },
    })),
    { label: `SLO p${job.slo.percentile} ${job.slo.latency_ms} ms`, stroke: "#b3261e", dash: [6, 4], width: 1.5, points: { show: false } },
  ];
  const el = document.getElementById("tuning-chart");
  const options = {
    width: Math.max(320, el.clientWidth || 900), height: 320, series,
    scales: { x: { time: false } },
    axes: [{ label: "throughput (req/s)" }, { label: `p${job.slo.percentile} latency (ms)` }],
  };
  if (chart && chart.series.length === series.length) { chart.setData(data); return; }
  if (chart) chart.destroy();
  chart = new uPlot(options, data, el);
}

if (root.dataset.watch) watch(Number(root.dataset.watch));
