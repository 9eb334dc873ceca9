// Every form submits once: its buttons are disabled as soon as it is sent, so a double click
// cannot send the same action twice (the services are idempotent as well).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || form.dataset.js) return;
  if (form.dataset.sent) {
    event.preventDefault();
    return;
  }
  form.dataset.sent = "1";
  // Disable after the browser has read the form, so the clicked button's name/value still goes.
  setTimeout(() => {
    for (const button of form.querySelectorAll("button[type=submit], button:not([type])")) {
      button.disabled = true;
      if (button.dataset.busy) button.textContent = button.dataset.busy;
    }
  }, 0);
});

// Coming back through the history cache must not leave a page with dead buttons.
window.addEventListener("pageshow", (event) => {
  if (!event.persisted) return;
  for (const form of document.querySelectorAll("form[data-sent]")) {
    delete form.dataset.sent;
    for (const button of form.querySelectorAll("button")) button.disabled = false;
  }
});
