// Shared by the dashboard pages: the WebSocket feed, a 15-minute history kept in the browser,
// number formatting and uPlot charts with promote / rollback markers.
/* global uPlot */

export const HISTORY_S = 15 * 60;

// Connects to /ws/dashboards/ (reconnecting) and calls handlers.backfill / .frame / .compare.
export function connect(model, handlers) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const query = model ? `?model=${encodeURIComponent(model)}` : "";
  const url = `${proto}//${location.host}/ws/dashboards/${query}`;
  const feed = { socket: null, send: (msg) => feed.socket && feed.socket.readyState === 1 && feed.socket.send(JSON.stringify(msg)) };
  let delay = 500;
  const open = () => {
    const socket = new WebSocket(url);
    feed.socket = socket;
    socket.onopen = () => { delay = 500; setStatus("live"); handlers.open && handlers.open(); };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      const handler = handlers[msg.type.replace(".", "_")];
      if (handler) handler(msg);
    };
    socket.onclose = () => {
      setStatus("reconnecting");
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 10000);
    };
  };
  open();
  return feed;
}

function setStatus(text) {
  const el = document.querySelector("[data-feed-status]");
  if (el) { el.textContent = text; el.dataset.feedStatus = text; }
}

// Columnar time series, trimmed to the last HISTORY_S seconds.
export class Series {
  constructor(names) { this.names = names; this.t = []; this.cols = names.map(() => []); }
  push(t, values) {
    if (this.t.length && t <= this.t[this.t.length - 1]) return false;
    this.t.push(t);
    this.names.forEach((name, i) => this.cols[i].push(values[name] ?? null));
    while (this.t.length && t - this.t[0] > HISTORY_S) { this.t.shift(); this.cols.forEach((c) => c.shift()); }
    return true;
  }
  data() { return [this.t, ...this.cols]; }
}

export const ms = (us) => (us == null ? null : us / 1000);

export function fmt(value, digits = 1, unit = "") {
  if (value == null || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  const text = abs >= 1000 ? value.toFixed(0) : abs >= 100 ? value.toFixed(Math.min(digits, 1)) : value.toFixed(digits);
  return unit ? `${text} ${unit}` : text;
}

export function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(1)} ${units[i]}`;
}

export function pct(fraction) { return fraction == null ? "–" : `${(fraction * 100).toFixed(0)} %`; }

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
export const color = (i) => COLORS[i % COLORS.length];

// Vertical lines at promote / rollback times, labelled with the version.
function markersPlugin(getMarkers) {
  return {
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        const [xmin, xmax] = [u.scales.x.min, u.scales.x.max];
        ctx.save();
        ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
        for (const m of getMarkers()) {
          if (m.time < xmin || m.time > xmax) continue;
          const x = Math.round(u.valToPos(m.time, "x", true));
          ctx.strokeStyle = m.action === "rollback" ? "#dc2626" : "#16a34a";
          ctx.fillStyle = ctx.strokeStyle;
          ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.lineWidth = 1.5 * devicePixelRatio;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(`${m.action === "rollback" ? "↩" : "▲"} v${m.version}`, x + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

// A line chart whose series set can change (replicas come and go): it is rebuilt when it does.
export class LiveChart {
  constructor(el, { title, unit = "", getMarkers = () => [], height = 220 }) {
    this.el = el; this.title = title; this.unit = unit; this.getMarkers = getMarkers; this.height = height;
    this.labels = null; this.plot = null; this.updates = 0;
  }
  setData(labels, data) {
    const key = labels.join("|");
    if (key !== this.labels) { this.build(labels); this.labels = key; }
    this.plot.setData(data);
    this.updates += 1;
    this.el.dataset.updates = String(this.updates);
    this.el.dataset.points = String(data[0].length);
  }
  build(labels) {
    if (this.plot) this.plot.destroy();
    const width = Math.max(this.el.clientWidth || 480, 240);
    const unit = this.unit;
    this.plot = new uPlot({
      title: this.title, width, height: this.height,
      // Everything charted is non-negative; start at 0 and never collapse an all-zero series.
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      series: [{}, ...labels.map((label, i) => ({
        label, stroke: color(i), width: i === 0 ? 2 : 1.25, spanGaps: false,
        value: (u, v) => fmt(v, 2, unit),
      }))],
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => fmt(v, v !== 0 && Math.abs(v) < 1 ? 2 : 1)) }],
      legend: { live: true },
      plugins: [markersPlugin(this.getMarkers)],
    }, null, this.el);
  }
  redraw() { if (this.plot) this.plot.redraw(false, false); }
  resize() { if (this.plot) this.plot.setSize({ width: Math.max(this.el.clientWidth, 240), height: this.height }); }
}

// A tiny axis-less chart for tables.
export function sparkline(el, data) {
  if (!el._plot) {
    el._plot = new uPlot({
      width: 140, height: 32, cursor: { show: false }, legend: { show: false }, select: { show: false },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: "#2563eb", width: 1.5, fill: "rgba(37,99,235,0.12)" }],
    }, data, el);
  } else {
    el._plot.setData(data);
  }
  el.dataset.points = String(data[0].length);
}

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
