// Fleet overview: every model with a throughput sparkline, its replicas and latency, and every
// replica's CPU, memory and GPUs.
import { HISTORY_S, LiveChart, bytes, connect, escapeHtml, fmt, ms, pct, sparkline } from "./live.js";

const root = document.querySelector("[data-dashboard-fleet]");
const dashboardUrl = root.dataset.modelUrl; // ends with a placeholder model name "__model__"
const history = new Map(); // model -> {t: [], rps: []}
const known = new Set(JSON.parse(document.getElementById("registry-models").textContent).map((m) => m.name));
const resources = []; // [{t, u: {"cpu <replica>": 0..100, "gpu<i> <replica>": 0..100}}]
const resourceChart = new LiveChart(document.getElementById("chart-resources"), { title: "CPU and GPU utilisation (%)", unit: "%" });
window.porticoFleet = { frames: 0, history, resources };

function rememberResources(t, replicas) {
  const u = {};
  for (const r of replicas) {
    if (!r.up || !r.system) continue;
    if (r.system.cpu_utilization != null) u[`CPU ${r.id}`] = 100 * r.system.cpu_utilization;
    for (const g of r.system.gpus || []) u[`GPU${g.index} ${r.id}`] = 100 * g.utilization;
  }
  resources.push({ t, u });
  while (resources.length && t - resources[0].t > HISTORY_S) resources.shift();
  const labels = [...new Set(resources.flatMap((p) => Object.keys(p.u)))].sort();
  if (!labels.length) return;
  resourceChart.setData(labels, [resources.map((p) => p.t), ...labels.map((l) => resources.map((p) => p.u[l] ?? null))]);
}

function remember(t, name, rps) {
  let h = history.get(name);
  if (!h) { h = { t: [], rps: [] }; history.set(name, h); }
  if (h.t.length && t <= h.t[h.t.length - 1]) return;
  h.t.push(t); h.rps.push(rps);
  while (h.t.length && t - h.t[0] > HISTORY_S) { h.t.shift(); h.rps.shift(); }
}

function modelRow(name, entry) {
  const c = entry?.combined;
  const href = dashboardUrl.replace("__model__", encodeURIComponent(name));
  const cells = c
    ? [entry.replicas_up, fmt(c.requests_per_s, 1), fmt(ms(c.latency_us.request.p95), 2), fmt(ms(c.latency_us.queue.p95), 2), c.queue_depth, fmt(c.failures_per_s, 2)]
    : [0, "–", "–", "–", "–", "–"];
  return `<tr data-model="${escapeHtml(name)}"><td><a href="${href}">${escapeHtml(name)}</a></td>
    <td><div class="spark" data-spark="${escapeHtml(name)}"></div></td>
    ${cells.map((v) => `<td class="num">${v}</td>`).join("")}</tr>`;
}

function render(msg) {
  const names = [...new Set([...known, ...Object.keys(msg.models)])].sort();
  const body = document.getElementById("model-rows");
  body.innerHTML = names.map((n) => modelRow(n, msg.models[n])).join("") ||
    "<tr><td colspan='8' class='muted'>No models yet.</td></tr>";
  for (const name of names) {
    const h = history.get(name);
    const el = body.querySelector(`[data-spark="${CSS.escape(name)}"]`);
    if (h && el) sparkline(el, [h.t, h.rps]);
  }
  document.getElementById("replica-rows").innerHTML = msg.replicas.map((r) => {
    const s = r.system || {};
    const gpus = (s.gpus || []).map((g) => `<span title="${escapeHtml(g.uuid || "")}">GPU${g.index} ${pct(g.utilization)} · ${bytes(g.memory_used_bytes)} / ${bytes(g.memory_total_bytes)} · ${fmt(g.power_usage_w, 0, "W")} / ${fmt(g.power_limit_w, 0, "W")}</span>`).join("<br>") || "<span class='muted'>none</span>";
    return `<tr><td>${escapeHtml(r.id)}</td><td class="mono small">${escapeHtml(r.url)}</td>
      <td><span class="badge ${r.up ? "ok" : "bad"}">${r.up ? "up" : "down"}</span> <span class="muted small">${escapeHtml(r.error || "")}</span></td>
      <td class="num">${r.models}</td><td class="num">${pct(s.cpu_utilization)}</td>
      <td class="num">${bytes(s.cpu_memory_used_bytes)} / ${bytes(s.cpu_memory_total_bytes)}</td><td>${gpus}</td></tr>`;
  }).join("") || "<tr><td colspan='7' class='muted'>No live replicas.</td></tr>";
  const up = msg.replicas.filter((r) => r.up).length;
  document.querySelector("[data-stat='replicas']").textContent = `${up} / ${msg.replicas.length}`;
}

connect(null, {
  backfill(msg) {
    for (const p of msg.points) for (const [name, m] of Object.entries(p.models)) remember(p.t, name, m.rps);
  },
  frame(msg) {
    window.porticoFleet.frames += 1;
    root.dataset.frames = String(window.porticoFleet.frames);
    for (const [name, m] of Object.entries(msg.models)) remember(msg.time, name, m.combined.requests_per_s);
    render(msg);
    rememberResources(msg.time, msg.replicas);
  },
});
