// "Try it": posts the request to the console, which forwards it to the serving HTTP API.
import { escape } from "./progress.js";

const form = document.getElementById("try-form");
// Six significant digits and at most 64 values: enough to check an answer at a glance.
const preview = (data) => {
  const values = (data || []).slice(0, 64).map((v) => (typeof v === "number" ? Number(v.toPrecision(6)) : v));
  return `[${values.map((v) => JSON.stringify(v)).join(", ")}${data.length > 64 ? `, … ${data.length - 64} more` : ""}]`;
};
const csrf = () => document.cookie.split("; ").find((c) => c.startsWith("csrftoken="))?.split("=")[1] ?? "";

if (form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    const result = document.getElementById("try-result");
    const errorBox = document.getElementById("try-error");
    const body = document.querySelector("#try-outputs tbody");
    const latency = document.getElementById("try-latency");
    let request;
    try {
      request = JSON.parse(form.elements.request.value);
    } catch (error) {
      result.hidden = false; body.innerHTML = ""; errorBox.hidden = false;
      errorBox.textContent = `The request is not valid JSON: ${error.message}`;
      return;
    }
    button.disabled = true;
    latency.textContent = "sending…";
    try {
      const response = await fetch(form.dataset.url, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
        body: JSON.stringify({ request, version: form.elements.version.value || null }),
      });
      const data = await response.json();
      result.hidden = false;
      const answer = data.response || {};
      if (!response.ok || data.status >= 400 || !answer.outputs) {
        body.innerHTML = "";
        errorBox.hidden = false;
        errorBox.textContent = data.message || answer.error || JSON.stringify(answer);
        latency.textContent = data.status ? `HTTP ${data.status} in ${data.latency_ms} ms` : "";
      } else {
        errorBox.hidden = true;
        body.innerHTML = answer.outputs.map((o) => `<tr><td class="mono">${escape(o.name)}</td>
          <td>${escape(o.datatype)}</td><td class="mono nowrap">[${escape(o.shape.join(", "))}]</td>
          <td class="mono data">${escape(preview(o.data))}</td></tr>`).join("");
        latency.textContent = `${answer.model_name} v${answer.model_version ?? "?"} answered in ${data.latency_ms} ms`;
      }
    } catch (error) {
      result.hidden = false; errorBox.hidden = false;
      errorBox.textContent = `The console did not answer: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  });
}
