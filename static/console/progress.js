// Watches a version's validation: WebSocket first (steps arrive as the worker finishes them), with
// polling of the progress URL as a fallback when the socket cannot open or drops.
const FINAL = new Set(["ready", "failed", "promoted", "retired"]);

export function watchVersion({ wsPath, pollUrl, onUpdate }) {
  let stopped = false;
  let pollTimer = null;
  let socket = null;

  const deliver = (data) => {
    if (stopped || !data || !data.state) return;
    onUpdate(data);
    if (FINAL.has(data.state)) stop();
  };
  const poll = async () => {
    if (stopped) return;
    try {
      const response = await fetch(pollUrl, { headers: { Accept: "application/json" } });
      if (response.ok) deliver(await response.json());
    } catch (error) { /* keep polling */ }
    if (!stopped) pollTimer = setTimeout(poll, 1000);
  };
  const startPolling = () => { if (!pollTimer && !stopped) poll(); };
  const stop = () => {
    stopped = true;
    clearTimeout(pollTimer);
    if (socket && socket.readyState <= 1) socket.close();
  };

  try {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${wsPath}`);
    socket.onmessage = (event) => deliver(JSON.parse(event.data));
    socket.onerror = startPolling;
    socket.onclose = () => { if (!stopped) startPolling(); };
  } catch (error) {
    startPolling();
  }
  return { stop };
}

const escape = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => (
  { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

const duration = (ms) => (ms == null ? "—" : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

export function renderSteps(list, steps) {
  list.innerHTML = steps.map((step) => `
    <li class="${escape(step.status)}"><span><span class="badge ${escape(step.status)}">${escape(step.status)}</span></span>
    <strong>${escape(step.name)}</strong><span class="muted">${duration(step.duration_ms)}</span>
    <span class="message-text">${escape(step.message)}</span></li>`).join("");
}

export function summary(data) {
  const failed = (data.steps || []).find((s) => s.status === "failed");
  if (data.state === "failed") {
    const why = failed ? ` at “${escape(failed.name)}”: ${escape(failed.message)}` : (data.error ? `: ${escape(data.error)}` : "");
    return `<p class="errorbox" role="alert">Validation failed${why}</p>`;
  }
  if (FINAL.has(data.state)) return `<p class="message success">Validation passed: v${data.version} is ${escape(data.state)}.</p>`;
  if (data.state === "uploaded") return `<p class="muted">Waiting for a worker to start validating…</p>`;
  return `<p class="muted">Validating… ${(data.steps || []).length} step(s) done.</p>`;
}

export { escape, FINAL };
