// The models list's SLO column: each model's status (meeting / burning / breached over 5 min and
// 1 h) from the dashboards' live frames.
import { connect } from "./dashboards/live.js";

const cells = document.querySelectorAll("[data-slo-status]");
connect(null, {
  frame(msg) {
    for (const cell of cells) {
      const entry = (msg.slo || {})[cell.dataset.sloStatus];
      const status = entry ? entry.status : "no traffic";
      cell.textContent = status;
      cell.className = `badge ${status === "meeting" ? "meets" : status.replace(" ", "-")}`;
      cell.dataset.state = status;
    }
  },
});
