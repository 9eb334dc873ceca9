// Version page: while the version validates, its steps update in place (no reload).
import { FINAL, renderSteps, summary, watchVersion } from "./progress.js";

const section = document.getElementById("validation");
if (section && section.hasAttribute("data-live")) {
  const list = document.getElementById("validation-steps");
  const badge = document.getElementById("version-state");
  const note = document.getElementById("validation-live");
  watchVersion({
    wsPath: section.dataset.progressWs,
    pollUrl: section.dataset.progressUrl,
    onUpdate(data) {
      renderSteps(list, data.steps || []);
      document.getElementById("validation-summary").innerHTML = summary(data);
      badge.textContent = data.state;
      badge.className = `badge ${data.state}`;
      if (FINAL.has(data.state)) {
        note.innerHTML = `done · <a href="">reload for the completed config</a>`;
      }
    },
  });
}
