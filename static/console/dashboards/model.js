// One model's live dashboard: throughput, latency split into queue and compute, queue depth,
// batch sizes and errors, combined and per replica, the last 15 minutes kept in the browser.
import { HISTORY_S, LiveChart, bytes, connect, escapeHtml, fmt, ms, pct } from "./live.js";

const root = document.querySelector("[data-dashboard-model]");
const model = root.dataset.dashboardModel;
const rows = [];
const markers = [];
const getMarkers = () => markers;
const charts = {
  throughput: new LiveChart(document.getElementById("chart-throughput"), { title: "Throughput (req/s)", unit: "req/s", getMarkers }),
  latency: new LiveChart(document.getElementById("chart-latency"), { title: "Latency end to end (ms)", unit: "ms", getMarkers }),
  split: new LiveChart(document.getElementById("chart-split"), { title: "Where the time goes: queue vs compute (ms)", unit: "ms", getMarkers }),
  queue: new LiveChart(document.getElementById("chart-queue"), { title: "Queue depth and in flight", getMarkers }),
};
window.porticoDashboard = { model, rows, markers, charts, frames: 0 };

function rowFromCombined(t, c, byReplica) {
  const lat = c.latency_us || {};
  const r = {};
  for (const [id, s] of Object.entries(byReplica || {})) {
    r[id] = { rps: s.requests_per_s, p95: ms(s.latency_us?.request?.p95) };
  }
  return {
    t,
    c: {
      rps: c.requests_per_s ?? c.rps, eps: c.failures_per_s ?? c.eps,
      queue_depth: c.queue_depth, in_flight: c.in_flight,
      p50: ms(lat.request?.p50), p95: ms(lat.request?.p95), p99: ms(lat.request?.p99),
      q50: ms(lat.queue?.p50), q95: ms(lat.queue?.p95), q99: ms(lat.queue?.p99),
      c50: ms(lat.compute_infer?.p50), c95: ms(lat.compute_infer?.p95), c99: ms(lat.compute_infer?.p99),
    },
    r,
  };
}

function addRow(row) {
  if (rows.length && row.t <= rows[rows.length - 1].t) return;
  rows.push(row);
  while (rows.length && row.t - rows[0].t > HISTORY_S) rows.shift();
}

let slo = null;

// meeting / burning (missed over 5 min) / breached (missed over the hour), as the alert rules say.
function renderSlo() {
  const el = document.querySelector("[data-stat=slo]");
  if (!el) return;
  if (!slo) { el.textContent = "none"; el.className = "value muted"; return; }
  el.textContent = slo.status;
  el.className = `value slo-${slo.status.replace(" ", "-")}`;
  const label = document.querySelector("[data-slo-label]");
  const fmtWindow = (w) => (w.latency_ms == null ? "–" : `${fmt(w.latency_ms, 1)} ms`);
  label.textContent = `SLO p${slo.slo.percentile} ≤ ${slo.slo.latency_ms} ms`;
  label.title = `p${slo.slo.percentile} over 5 min ${fmtWindow(slo.short)}, over 1 h ${fmtWindow(slo.long)}`;
}

function redraw() {
  const t = rows.map((r) => r.t);
  const replicas = [...new Set(rows.flatMap((r) => Object.keys(r.r)))].sort();
  const col = (f) => rows.map(f);
  charts.throughput.setData(
    ["all replicas", ...replicas.map((id) => `replica ${id}`), "errors/s"],
    [t, col((r) => r.c.rps), ...replicas.map((id) => col((r) => r.r[id]?.rps ?? null)), col((r) => r.c.eps)],
  );
  const perReplica = replicas.length > 1 ? replicas : [];
  // The SLO's target, when the model has one, as a flat line on the latency chart.
  const target = slo ? [`SLO p${slo.slo.percentile} ${slo.slo.latency_ms} ms`] : [];
  charts.latency.setData(
    ["p50", "p95", "p99", ...perReplica.map((id) => `p95 ${id}`), ...target],
    [t, col((r) => r.c.p50), col((r) => r.c.p95), col((r) => r.c.p99),
      ...perReplica.map((id) => col((r) => r.r[id]?.p95 ?? null)),
      ...(slo ? [col(() => slo.slo.latency_ms)] : [])],
  );
  charts.split.setData(
    ["queue p50", "queue p95", "queue p99", "compute p50", "compute p95", "compute p99"],
    [t, col((r) => r.c.q50), col((r) => r.c.q95), col((r) => r.c.q99), col((r) => r.c.c50), col((r) => r.c.c95), col((r) => r.c.c99)],
  );
  charts.queue.setData(["queue depth", "in flight"], [t, col((r) => r.c.queue_depth), col((r) => r.c.in_flight)]);
}

function setStat(name, text) {
  const el = root.querySelector(`[data-stat="${name}"]`);
  if (el) el.textContent = text;
}

function summaryCells(s) {
  const lat = s.latency_us || {};
  return [fmt(s.requests_per_s, 1), fmt(ms(lat.request?.p50), 2), fmt(ms(lat.request?.p95), 2), fmt(ms(lat.request?.p99), 2),
    fmt(ms(lat.queue?.p95), 2), fmt(ms(lat.compute_infer?.p95), 2), String(s.queue_depth ?? "–"), String(s.in_flight ?? "–"),
    fmt(s.failures_per_s, 2)].map((v) => `<td class="num">${v}</td>`).join("");
}

function renderTables(entry, replicas) {
  const byReplica = Object.entries(entry.by_replica || {}).map(([id, s]) => `<tr><td>${escapeHtml(id)}</td>${summaryCells(s)}</tr>`);
  document.getElementById("replica-rows").innerHTML =
    `<tr class="combined"><td><strong>combined</strong></td>${summaryCells(entry.combined)}</tr>${byReplica.join("")}`;
  document.getElementById("version-rows").innerHTML = Object.entries(entry.by_version || {})
    .map(([v, s]) => `<tr><td>v${escapeHtml(v)} <span class="muted small">${escapeHtml((entry.versions?.[v] || []).join(", "))}</span></td>${summaryCells(s)}</tr>`)
    .join("");
  renderBars("batch-sizes", entry.combined.batch_sizes, (k) => `batch ${k}`);
  renderBars("release-reasons", entry.combined.release_reasons, (k) => k);
  renderBars("errors", entry.combined.failures_by_reason, (k) => k);
  document.getElementById("system-rows").innerHTML = replicas.map((r) => {
    const s = r.system || {};
    const gpus = (s.gpus || []).map((g) => `GPU${g.index} ${pct(g.utilization)} ${bytes(g.memory_used_bytes)}/${bytes(g.memory_total_bytes)} ${fmt(g.power_usage_w, 0, "W")}`).join("<br>") || "<span class='muted'>none</span>";
    return `<tr><td>${escapeHtml(r.id)}</td><td><span class="badge ${r.up ? "ok" : "bad"}">${r.up ? "up" : "down"}</span> <span class="muted small">${escapeHtml(r.error || "")}</span></td>
      <td class="num">${pct(s.cpu_utilization)}</td><td class="num">${bytes(s.cpu_memory_used_bytes)} / ${bytes(s.cpu_memory_total_bytes)}</td><td>${gpus}</td></tr>`;
  }).join("");
}

function renderBars(id, counts, label) {
  const el = document.getElementById(id);
  const entries = Object.entries(counts || {});
  const total = entries.reduce((a, [, n]) => a + n, 0);
  el.innerHTML = entries.length
    ? entries.map(([k, n]) => `<div class="bar-row"><span class="bar-label">${escapeHtml(label(k))}</span><span class="bar" style="width:${Math.max((100 * n) / total, 1)}%"></span><span class="num small">${n}</span></div>`).join("")
    : "<p class='muted small'>none in the last window</p>";
}

function renderMarkers() {
  document.getElementById("marker-list").innerHTML = markers.length === 0
    ? "<li class='muted'>none in the last 15 minutes</li>"
    : markers.slice(-8).reverse().map((m) =>
    `<li data-marker="${m.id}">${new Date(m.time * 1000).toLocaleTimeString()} · <strong>${m.action === "rollback" ? "rolled back" : "promoted"}</strong> to v${m.version ?? "?"}${m.from_version ? ` from v${m.from_version}` : ""} <span class="muted">by ${escapeHtml(m.actor || "")}</span></li>`).join("");
  root.dataset.markers = String(markers.length);
}

function addMarkers(list) {
  const known = new Set(markers.map((m) => m.id));
  for (const m of list || []) if (!known.has(m.id) && m.model === model) markers.push(m);
  renderMarkers();
}

connect(model, {
  backfill(msg) {
    for (const p of msg.points) if (p.models[model]) addRow(rowFromCombined(p.t, p.models[model], null));
    addMarkers(msg.markers);
    if (rows.length) redraw();
  },
  frame(msg) {
    window.porticoDashboard.frames += 1;
    slo = (msg.slo || {})[model] || null;
    renderSlo();
    addMarkers(msg.markers);
    const entry = msg.models[model];
    const replicas = msg.replicas.filter((r) => r.up || r.error);
    setStat("replicas", `${entry ? entry.replicas_up : 0} / ${msg.replicas.length}`);
    if (!entry) { setStat("rps", "0"); redraw(); return; }
    const c = entry.combined;
    addRow(rowFromCombined(msg.time, c, entry.by_replica));
    redraw();
    setStat("rps", fmt(c.requests_per_s, 1));
    setStat("p50", fmt(ms(c.latency_us.request.p50), 2));
    setStat("p95", fmt(ms(c.latency_us.request.p95), 2));
    setStat("p99", fmt(ms(c.latency_us.request.p99), 2));
    setStat("queue-p95", fmt(ms(c.latency_us.queue.p95), 2));
    setStat("compute-p95", fmt(ms(c.latency_us.compute_infer.p95), 2));
    setStat("queue-depth", String(c.queue_depth));
    setStat("errors", fmt(c.failures_per_s, 2));
    root.dataset.frames = String(window.porticoDashboard.frames);
    renderTables(entry, replicas);
  },
});

window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));
