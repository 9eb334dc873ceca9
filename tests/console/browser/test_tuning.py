"""The tuner in Chromium against a live console and a real Celery worker: set the SLO, start a
tuning, watch its progress bar move, see the chart and table, apply the recommendation; the SLO's
status then shows on the models list and the model's dashboard."""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command

from repository.demo_models import write_onnx_mlp
from repository.models import ModelVersion
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

TUNING_TIMEOUT_MS = 240_000


def test_tuning_in_the_browser(live_worker, console_only, session_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    UserFactory(username="dana", role="deployer")
    write_onnx_mlp(tmp_path / "models", "mlp", 1, max_batch_size=64)
    call_command("import_repository", str(tmp_path / "models"), sync=True, stdout=io.StringIO())
    session = session_factory(console_only.console_url)
    session.sign_in("dana")
    page = session.page
    page.goto("/models/mlp/versions/1/")
    page.click("text=Load test & tune")
    page.wait_for_url("**/models/mlp/versions/1/tuning/")

    page.fill("#slo-form input[name=latency_ms]", "400")
    page.fill("#slo-form input[name=expected_rate_per_s]", "20")
    page.click("#slo-form button[type=submit]")
    page.wait_for_selector("#slo-status:has-text('saved')")
    assert "p95 ≤ 400 ms" in page.inner_text("#slo-summary")

    page.fill("#tuning-form input[name=duration_s]", "0.4")
    page.fill("#tuning-form input[name=max_concurrency]", "2")
    page.click("#tuning-form button[type=submit]")
    page.wait_for_function(
        "document.getElementById('tuning-progress').value > 0", timeout=TUNING_TIMEOUT_MS
    )
    assert page.is_visible("#tuning-cancel")
    page.wait_for_selector("#tuning-table tbody tr", timeout=TUNING_TIMEOUT_MS)
    session.shot("tuning-running", docs="tuning-running")
    page.wait_for_selector("#tuning-root[data-tuning-state=succeeded]", timeout=TUNING_TIMEOUT_MS)
    assert page.locator("#tuning-table tbody tr").count() == 6
    assert page.locator("#tuning-chart canvas").count() >= 1
    assert "req/s within p95 ≤ 400 ms" in page.inner_text("#tuning-why")
    assert not page.is_visible("#tuning-cancel")
    session.shot("tuning-done", docs="tuning-done")

    page.click("#tuning-apply")
    page.wait_for_selector("#tuning-applied-link")
    assert page.inner_text("#tuning-applied-link") == "mlp v2"
    deadline = time.monotonic() + 120
    while ModelVersion.objects.get(model__name="mlp", number=2).state != "ready":
        assert time.monotonic() < deadline, live_worker.output()[-3000:]
        time.sleep(0.5)
    page.click("#tuning-applied-link")
    page.wait_for_url("**/models/mlp/versions/2/")
    assert "instance_group" in page.inner_text("#config")
    session.shot("tuning-applied")

    # The SLO set above is judged live: no replica serves mlp here, so there is no traffic yet.
    page.goto("/")
    page.wait_for_selector("[data-slo-status=mlp][data-state='no traffic']")
    assert "p95 ≤ 400 ms" in page.inner_text("main")
    page.goto("/dashboards/models/mlp/")
    page.wait_for_function("document.querySelector('[data-stat=slo]').textContent === 'no traffic'")
    assert page.inner_text("[data-slo-label]") == "SLO p95 ≤ 400 ms"
    session.shot("tuning-slo-dashboard")
    assert session.errors == []
