"""The console's real flows in Chromium against a live console, Celery worker and serving replica.

One story, in order, because each step builds on the last (and starting the platform once keeps
the suite short): sign in; upload an ONNX model in chunks with a dropped connection, watching the
progress bar; validation steps arrive live until ready; promote and watch the replica switch over;
"Try it"; a broken upload fails with its reason; a second good version is promoted and rolled back;
a Python model is approved by a second user (an admin) and promoted; tokens, audit log, replicas.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from repository.demo_models import write_corrupt_onnx, write_onnx_mlp, write_python_add_sub
from repository.models import Event, ModelVersion
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

VALIDATION_TIMEOUT_MS = 150_000
SWITCH_TIMEOUT_MS = 90_000
CHUNK_BYTES = 256 * 1024
V3_CONFIG = (
    'name: "mlp"\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 500 }\n'
)

# Small chunks so a few-MB model takes many requests; record every value the progress bar shows.
OBSERVE_UPLOAD = f"""
window.porticoUploadChunkBytes = {CHUNK_BYTES};
window.__progress = [];
document.addEventListener("DOMContentLoaded", () => {{
  const bar = document.getElementById("upload-progress");
  if (!bar) return;
  new MutationObserver(() => window.__progress.push(Number(bar.getAttribute("aria-valuenow"))))
    .observe(bar, {{attributes: true, attributeFilter: ["aria-valuenow"]}});
}});
"""


def upload(
    session: Any, model: str, files: list[Path], *, expect: str, config: str | None = None
) -> dict[str, Any]:
    """Upload ``files`` as a new version of ``model`` (with ``config`` typed into the editor, if
    given); wait for validation to end in ``expect``."""
    page = session.page
    page.goto(f"/upload/?model={model}")
    page.set_input_files("#file-input", [str(f) for f in files])
    page.wait_for_selector("#create-version:not([disabled])", timeout=60_000)
    if config is not None:
        page.fill("#config-editor", config)
    page.click("#create-version")
    page.wait_for_selector(f"#validation[data-state={expect}]", timeout=VALIDATION_TIMEOUT_MS)
    href = page.get_attribute("#version-link", "href")
    number = int(re.search(r"/versions/(\d+)/", href).group(1))  # type: ignore[union-attr]
    return {"href": href, "number": number}


def confirm(session: Any, selector: str, expected_text: str, *, double: bool = False) -> None:
    page = session.page
    page.click(selector)
    page.wait_for_selector("#changes")
    assert expected_text in page.inner_text("#changes")
    if double:
        page.dblclick("#confirm")
    else:
        page.click("#confirm")
    page.wait_for_selector(".messages")
    assert page.locator(".message.error").count() == 0, page.inner_text(".messages")


def test_console_flows(live_platform, session_factory, tmp_path):
    UserFactory(username="dana", role="deployer")
    UserFactory(username="ada", role="admin")
    repo = tmp_path / "models"
    repo.mkdir()
    onnx_file = write_onnx_mlp(repo, "mlp") / "1" / "model.onnx"
    corrupt_file = write_corrupt_onnx(repo, "broken") / "1" / "model.onnx"
    python_dir = write_python_add_sub(repo, "add_sub")

    session = session_factory(live_platform.console_url)
    page = session.page
    page.goto("/")
    session.shot("01-sign-in")
    session.sign_in("dana")
    assert page.locator(".empty", has_text="No models yet").is_visible()
    session.shot("02-models-empty")

    # --- upload in chunks, with one chunk's connection dropped -----------------------------------
    session.context.add_init_script(OBSERVE_UPLOAD)
    dropped: list[str] = []

    def drop_third_chunk(route: Any) -> None:
        if route.request.method == "PUT":
            dropped.append(route.request.url)
            if len(dropped) == 3:
                route.abort("connectionreset")
                return
        route.continue_()

    page.route("**/uploads/sessions/*/", drop_third_chunk)
    page.goto("/upload/?model=mlp")
    page.set_input_files("#file-input", str(onnx_file))
    page.wait_for_selector("#create-version:not([disabled])", timeout=60_000)
    page.unroute("**/uploads/sessions/*/")
    progress = page.evaluate("window.__progress")
    size = onnx_file.stat().st_size
    assert len(dropped) > size // CHUNK_BYTES, "every chunk went as its own request (+1 retried)"
    assert any(0 < value < 100 for value in progress), progress
    assert progress[-1] == 100
    assert "INPUT0" in page.input_value("#config-editor")  # auto-complete prefilled the editor
    session.shot("03-upload-done")
    frames: list[str] = []
    page.on(
        "websocket",
        lambda ws: (
            ws.on("framereceived", lambda payload: frames.append(payload))
            if "/ws/versions/" in ws.url
            else None
        ),
    )
    page.click("#create-version")
    page.wait_for_selector("#validation-steps li", timeout=VALIDATION_TIMEOUT_MS)
    page.wait_for_selector("#validation[data-state=ready]", timeout=VALIDATION_TIMEOUT_MS)
    assert page.locator("#validation-steps li.passed").count() >= 2
    # The steps came over the WebSocket, several messages as validation went on.
    assert sum('"steps"' in frame for frame in frames) >= 2, frames
    session.shot("04-upload-validated", docs="console-upload")
    version = ModelVersion.objects.get(model__name="mlp", number=1)
    assert version.size == size and version.state == "ready"

    page.click("#version-link")
    page.wait_for_selector("#config")
    assert page.locator("#config .autocompleted").count() == 0  # the prefilled config was kept
    session.shot("05-version-ready")

    # --- promote; the replica switches over ------------------------------------------------------
    page.goto("/models/mlp/")
    confirm(session, "[data-action=promote]", "mlp v1 becomes the promoted version")
    assert "mlp v1 is promoted" in page.inner_text(".messages")
    page.wait_for_selector("#serving-table >> text=v1 live", timeout=SWITCH_TIMEOUT_MS)
    session.shot("06-model-promoted", docs="console-model")

    # --- try it ----------------------------------------------------------------------------------
    page.click("#try-form button[type=submit]")
    page.wait_for_selector("#try-outputs tbody tr")
    assert "OUTPUT0" in page.inner_text("#try-outputs")
    assert re.search(r"answered in [\d.]+ ms", page.inner_text("#try-latency"))
    page.locator("#try-result").scroll_into_view_if_needed()
    session.shot("07-try-it", docs="console-try-it")
    # The models list now has last-minute numbers from the replica's live stats.
    page.goto("/")
    cells = page.locator("tr", has_text="mlp").locator("td")
    assert float(cells.nth(4).inner_text()) > 0, cells.nth(4).inner_text()
    assert cells.nth(5).inner_text().endswith(" ms")

    # --- a broken model fails with the step and the reason ---------------------------------------
    # Dropped on the page this time (a drag and drop carrying the file).
    page.goto("/upload/?model=mlp")
    drop = page.evaluate_handle(
        """([name, bytes]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([new Uint8Array(bytes)], name));
            return transfer;
        }""",
        ["model.onnx", list(corrupt_file.read_bytes())],
    )
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": drop})
    page.wait_for_selector("#create-version:not([disabled])")
    page.click("#create-version")
    page.wait_for_selector("#validation[data-state=failed]", timeout=VALIDATION_TIMEOUT_MS)
    broken = {"href": page.get_attribute("#version-link", "href")}
    summary = page.inner_text("#validation-summary")
    assert "Validation failed at" in summary, summary
    session.shot("08-upload-failed")
    page.goto(broken["href"])
    assert page.locator(".errorbox", has_text="Validation failed at").is_visible()
    session.shot("09-version-failed", docs="console-version-failed")

    # --- a second good version, promoted, then rolled back ---------------------------------------
    # This time the config says only what differs; auto-complete fills in the rest.
    good = upload(session, "mlp", [onnx_file], expect="ready", config=V3_CONFIG)
    page.goto(good["href"])
    assert page.locator("#config .autocompleted").count() > 0
    assert "+max_batch_size: 8" in page.inner_text("#config-diff")
    session.shot("09b-version-autocompleted", docs="console-version")
    page.goto("/models/mlp/")
    # A double click sends one promote (a second would fail: the version is promoted by then).
    confirm(
        session,
        f"tr[data-version='{good['number']}'] [data-action=promote]",
        "v1, promoted now, becomes retired",
        double=True,
    )
    assert Event.objects.filter(action="promote", to_version=good["number"]).count() == 1
    page.wait_for_selector(
        f"#serving-table >> text=v{good['number']} live", timeout=SWITCH_TIMEOUT_MS
    )
    confirm(session, "[data-action=rollback]", "v1 becomes the promoted version again")
    assert "Rolled back: mlp v1 is promoted again" in page.inner_text(".messages")
    page.wait_for_selector("#serving-table >> text=v1 live", timeout=SWITCH_TIMEOUT_MS)
    session.shot("10-model-rolled-back")

    # --- Python code needs a second person's approval --------------------------------------------
    upload(
        session,
        "add_sub",
        [python_dir / "1" / "model.py", python_dir / "config.pbtxt"],
        expect="ready",
    )
    page.goto("/models/add_sub/")
    assert page.locator("[data-action=promote]").count() == 0  # not approved yet
    assert page.locator("[data-action=approve]").count() == 0  # deployers cannot approve
    session.sign_out()
    session.sign_in("ada")
    page.goto("/models/add_sub/")
    confirm(session, "[data-action=approve]", "carries Python code uploaded by dana")
    assert "add_sub v1 is approved" in page.inner_text(".messages")
    confirm(session, "[data-action=promote]", "add_sub v1 becomes the promoted version")
    page.wait_for_selector("#serving-table >> text=v1 live", timeout=SWITCH_TIMEOUT_MS)
    session.shot("11-python-approved-promoted")

    # --- the other pages -------------------------------------------------------------------------
    page.goto("/")
    assert page.locator("tr", has_text="add_sub").is_visible()
    session.shot("12-models", docs="console-models")
    page.goto("/events/?model=mlp")
    assert page.locator("table.events tr", has_text="rollback").count() >= 1
    session.shot("13-audit-log", docs="console-audit-log")
    page.goto("/tokens/")
    page.fill("input[name=name]", "ci-deploy")
    page.select_option("select[name=role]", "deployer")
    page.click("text=Create token")
    key = page.inner_text("#new-token-key").strip()
    assert len(key) > 20
    session.shot("14-tokens")
    page.reload()
    assert key not in page.content()
    page.goto("/replicas/")
    assert page.locator(".badge.ready", has_text="live").count() == 1
    session.shot("15-replicas")
    assert session.errors == [], session.errors
