// Upload page: every file goes to its own upload session in chunks. Each chunk names its offset;
// after a failure the client asks the server how much it has and resumes from there.
import { escape, renderSteps, summary, watchVersion } from "./progress.js";

const root = document.getElementById("upload");
const form = document.getElementById("upload-form");
const CHUNK = window.porticoUploadChunkBytes || Number(root.dataset.chunkBytes);
const ARCHIVE = /\.(zip|tar\.gz|tgz|tar)$/i;
const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
const files = []; // {file, path, session, sent, done, row}
const $ = (id) => document.getElementById(id);

const showError = (text) => { $("upload-error").hidden = !text; $("upload-error").textContent = text || ""; };
const human = (bytes) => (bytes < 1e3 ? `${bytes} B` : bytes < 1e6 ? `${(bytes / 1e3).toFixed(1)} KB`
  : bytes < 1e9 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e9).toFixed(2)} GB`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function api(url, options = {}) {
  const response = await fetch(url, {
    ...options,
    headers: { "X-CSRFToken": csrf, Accept: "application/json", ...(options.headers || {}) },
  });
  let data = {};
  try { data = await response.json(); } catch (error) { /* not JSON */ }
  return { response, data };
}

function sendChunk(entry, offset, blob) {
  // XMLHttpRequest because fetch cannot report upload progress.
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", `${root.dataset.sessionUrl}${entry.session}/`);
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Upload-Offset", String(offset));
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (event) => { entry.sent = offset + event.loaded; render(); };
    xhr.onload = () => {
      let data = {};
      try { data = JSON.parse(xhr.responseText); } catch (error) { /* not JSON */ }
      resolve({ status: xhr.status, data });
    };
    xhr.onerror = () => reject(new Error("connection lost"));
    xhr.send(blob);
  });
}

async function resumeOffset(entry) {
  const { response, data } = await api(`${root.dataset.sessionUrl}${entry.session}/`);
  if (!response.ok) throw new Error(data.message || `HTTP ${response.status}`);
  return data.offset;
}

async function upload(entry) {
  const { response, data } = await api(root.dataset.sessionUrl, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ path: entry.path, size: entry.file.size }),
  });
  if (!response.ok) throw new Error(data.message || `HTTP ${response.status}`);
  entry.session = data.id;
  let offset = 0;
  let failures = 0;
  while (offset < entry.file.size) {
    try {
      const result = await sendChunk(entry, offset, entry.file.slice(offset, offset + CHUNK));
      if (result.status === 200) { offset = result.data.offset; failures = 0; }
      else if (result.status === 409 && Number.isInteger(result.data.offset)) { offset = result.data.offset; }
      else if (result.status >= 500) { throw new Error(`HTTP ${result.status}`); }
      else { throw Object.assign(new Error(result.data.message || `HTTP ${result.status}`), { fatal: true }); }
    } catch (error) {
      if (error.fatal || ++failures > 8) throw error;
      entry.note = `connection dropped; resuming (try ${failures})…`;
      render();
      await sleep(Math.min(500 * 2 ** failures, 8000));
      try { offset = await resumeOffset(entry); } catch (lookup) { /* retry the lookup next round */ }
      entry.note = `resumed at ${offset} bytes`;
    }
    entry.sent = offset;
    render();
  }
  entry.done = true;
  render();
}

function render() {
  const total = files.reduce((sum, f) => sum + f.file.size, 0);
  const sent = files.reduce((sum, f) => sum + Math.min(f.sent, f.file.size), 0);
  const percent = total ? Math.floor((sent / total) * 100) : (files.length && files.every((f) => f.done) ? 100 : 0);
  const bar = $("upload-progress");
  bar.setAttribute("aria-valuenow", String(percent));
  bar.firstElementChild.style.width = `${percent}%`;
  $("upload-bytes").textContent = `${percent}% · ${human(sent)} of ${human(total)}`;
  const allDone = files.length > 0 && files.every((f) => f.done);
  $("upload-label").textContent = allDone ? "Uploaded" : files.some((f) => f.error) ? "Upload failed" : "Uploading…";
  for (const f of files) {
    f.row.innerHTML = `<span class="mono">${escape(f.path)}</span><span class="muted small">${human(f.file.size)}</span>
      <span class="small ${f.error ? "error" : "muted"}">${escape(f.error || (f.done ? "uploaded" : f.note || `${Math.floor((f.sent / (f.file.size || 1)) * 100)}%`))}</span>`;
  }
  // Not while auto-complete is filling the editor: the version would go without what it shows.
  $("create-version").disabled = !allDone || root.dataset.busy === "1" || root.dataset.suggesting === "1";
  $("create-hint").textContent = allDone ? "All files are uploaded." : files.length ? "Uploading…" : "Add files first.";
}

function relativePath(file) {
  // A dropped or picked folder: drop its top-level name so the layout is the model folder's own.
  const path = file.webkitRelativePath || file.name;
  const parts = path.split("/");
  return parts.length > 1 ? parts.slice(1).join("/") : path;
}

async function addFiles(list) {
  showError("");
  const added = [...list].map((file) => ({ file, path: relativePath(file), sent: 0, done: false, row: document.createElement("li") }));
  for (const entry of added) {
    const existing = files.findIndex((f) => f.path === entry.path);
    if (existing >= 0) { files[existing].row.remove(); files.splice(existing, 1); }
    files.push(entry);
    $("file-list").append(entry.row);
  }
  $("upload-status").hidden = false;
  render();
  root.dataset.suggesting = "1"; // until the files are in and auto-complete has had its say
  try {
    await Promise.all(added.map((entry) => upload(entry).catch((error) => { entry.error = error.message; render(); showError(`${entry.path}: ${error.message}`); })));
  } finally {
    root.dataset.suggesting = "";
  }
  await suggestConfig();
  render();
}

async function suggestConfig() {
  const editor = $("config-editor");
  if (editor.value.trim() || files.length !== 1 || ARCHIVE.test(files[0].path) || !files[0].done) return;
  root.dataset.suggesting = "1";
  render();
  try {
    const { response, data } = await api(root.dataset.configUrl, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: form.elements.model.value, sessions: [files[0].session] }),
    });
    if (response.ok && data.config && !editor.value.trim()) {
      editor.value = data.config;
      editor.dataset.suggested = "1";
    }
  } finally {
    root.dataset.suggesting = "";
    render();
  }
}

const dropzone = $("dropzone");
dropzone.addEventListener("dragover", (event) => { event.preventDefault(); dropzone.classList.add("over"); });
dropzone.addEventListener("dragleave", () => dropzone.classList.remove("over"));
dropzone.addEventListener("drop", (event) => {
  event.preventDefault();
  dropzone.classList.remove("over");
  addFiles(event.dataTransfer.files);
});
// The suggested config names the model; keep that name in step with the name field.
form.elements.model.addEventListener("input", () => {
  const editor = $("config-editor");
  if (editor.dataset.suggested) editor.value = editor.value.replace(/^name: ".*"$/m, `name: "${form.elements.model.value.trim()}"`);
});
$("file-input").addEventListener("change", (event) => addFiles(event.target.files));
$("folder-input").addEventListener("change", (event) => addFiles(event.target.files));

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (root.dataset.busy === "1") return; // a double click sends one request
  root.dataset.busy = "1";
  render();
  showError("");
  const { response, data } = await api(root.dataset.finishUrl, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: form.elements.model.value.trim(), config: $("config-editor").value,
      sessions: files.map((f) => f.session) }),
  });
  if (!response.ok) {
    root.dataset.busy = "";
    render();
    showError(data.message || `The version was not created (HTTP ${response.status}).`);
    return;
  }
  form.querySelectorAll("input, textarea, button").forEach((el) => { el.disabled = true; });
  const panel = $("validation");
  panel.hidden = false;
  $("validation-title").textContent = `Validating ${data.model} v${data.version}`;
  $("version-link").href = data.url;
  $("validation-summary").innerHTML = summary(data);
  watchVersion({
    wsPath: `/ws/versions/${data.version_id}/`,
    pollUrl: data.progress_url,
    onUpdate(update) {
      renderSteps($("validation-steps"), update.steps || []);
      $("validation-summary").innerHTML = summary(update);
      panel.dataset.state = update.state;
    },
  });
});
