// Compare: two time ranges or two versions of one model side by side (p95, throughput, queue time),
// summarised by the console from its rolling store with percentiles from merged histograms.
import { connect, escapeHtml, fmt, ms } from "./live.js";

const root = document.querySelector("[data-dashboard-compare]");
const model = root.dataset.dashboardCompare;
const form = document.getElementById("compare-form");

const METRICS = [
  ["p95 latency (ms)", (s) => ms(s.latency_us.request.p95), "lower"],
  ["p50 latency (ms)", (s) => ms(s.latency_us.request.p50), "lower"],
  ["p99 latency (ms)", (s) => ms(s.latency_us.request.p99), "lower"],
  ["throughput (req/s)", (s) => s.requests_per_s, "higher"],
  ["queue time p95 (ms)", (s) => ms(s.latency_us.queue.p95), "lower"],
  ["queue time mean (ms)", (s) => ms(s.latency_us.queue.mean), "lower"],
  ["compute p95 (ms)", (s) => ms(s.latency_us.compute_infer.p95), "lower"],
  ["requests", (s) => s.requests, null, 0],
  ["failures", (s) => s.failures, "lower", 0],
];

function side(prefix) {
  const now = Date.now() / 1000;
  const from = parseFloat(form.elements[`${prefix}_from`].value || "0");
  const to = parseFloat(form.elements[`${prefix}_to`].value || "0");
  return { version: form.elements[`${prefix}_version`].value, start: now - from * 60, end: now - to * 60 };
}

function label(s) {
  const range = `${new Date(s.start * 1000).toLocaleTimeString()}–${new Date(s.end * 1000).toLocaleTimeString()}`;
  return `${s.version == null ? "all versions" : `v${s.version}`} · ${range}`;
}

function render(msg) {
  document.getElementById("label-a").textContent = label(msg.a);
  document.getElementById("label-b").textContent = label(msg.b);
  document.getElementById("compare-rows").innerHTML = METRICS.map(([name, get, better, digits = 2]) => {
    const a = get(msg.a); const b = get(msg.b);
    let change = "–"; let cls = "";
    if (a != null && b != null && a !== 0) {
      const delta = (100 * (b - a)) / a;
      change = `${delta > 0 ? "+" : ""}${delta.toFixed(1)} %`;
      if (better && Math.abs(delta) >= 5) cls = (better === "lower") === (delta < 0) ? "better" : "worse";
    }
    return `<tr><td>${escapeHtml(name)}</td><td class="num" data-side="a">${fmt(a, digits)}</td><td class="num" data-side="b">${fmt(b, digits)}</td><td class="num ${cls}">${change}</td></tr>`;
  }).join("");
  const versions = new Set([...msg.versions.map(String), ...[...form.elements.a_version.options].map((o) => o.value)]);
  for (const prefix of ["a", "b"]) {
    const select = form.elements[`${prefix}_version`];
    const present = new Set([...select.options].map((o) => o.value));
    for (const v of versions) if (!present.has(v)) select.add(new Option(`v${v}`, v));
  }
  root.dataset.compared = String(Number(root.dataset.compared || "0") + 1);
}

const feed = connect(model, {
  open: () => request(),
  compare: render,
  compare_error: (msg) => { document.getElementById("compare-error").textContent = msg.message; },
});

function request() { feed.send({ type: "compare", model, a: side("a"), b: side("b") }); }
form.addEventListener("submit", (e) => { e.preventDefault(); request(); });
setInterval(() => { if (form.elements.auto.checked) request(); }, 5000);
