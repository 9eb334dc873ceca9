"""The load-test and tuning page per role, and measured results on the compare page."""

from __future__ import annotations

import pytest
from django.utils import timezone

from repository.models import LoadTest, Tuning
from repository.tuning.services import slo_set
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db

CONFIG = 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'


def test_deployers_get_the_forms_and_viewers_only_the_results(
    deployer_client, viewer_client
) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    slo_set(model=version.model, actor=None, latency_ms=25, expected_rate_per_s=150)
    url = "/models/m/versions/1/tuning/"
    page = deployer_client.get(url).content.decode()
    assert 'id="tuning-form"' in page and 'id="slo-form"' in page and "data-can-deploy" in page
    assert "p95 ≤ 25 ms" in page and "expected 150 req/s" in page
    page = viewer_client.get(url).content.decode()
    assert 'id="tuning-form"' not in page and 'id="slo-form"' not in page
    assert (
        'href="/models/m/versions/1/tuning/"'
        in deployer_client.get("/models/m/versions/1/").content.decode()
    )


def test_unapproved_code_shows_why_it_cannot_be_load_tested(deployer_client) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model__name="m", number=1, config_text=CONFIG, needs_approval=True)
    page = deployer_client.get("/models/m/versions/1/tuning/").content.decode()
    assert 'id="tuning-refused"' in page and "must approve it first" in page
    assert 'id="tuning-form"' not in page


def test_compare_page_lists_measured_results_of_every_version(viewer_client) -> None:  # type: ignore[no-untyped-def]
    v1 = ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    v2 = ModelVersionFactory(model=v1.model, number=2, config_text=CONFIG)
    done = {"state": "succeeded", "finished_at": timezone.now()}
    for version, p95 in ((v1, 12.5), (v2, 7.25)):
        LoadTest.objects.create(
            version=version,
            parameters={"mode": "concurrency", "concurrency": 4, "duration_s": 10},
            result={"p95_ms": p95, "batch_sizes": {"4": 9}},
            **done,
        )
    Tuning.objects.create(
        version=v2,
        slo={"percentile": 95, "latency_ms": 20},
        **done,
        recommendation={
            "setting": {"label": "batching low (200 µs) × 2 instances"},
            "capacity_per_s": 812.0,
        },
    )
    page = viewer_client.get("/dashboards/models/m/compare/").content.decode()
    assert "12.50" in page and "7.25" in page and "4:9" in page
    assert "batching low (200 µs) × 2 instances" in page and "812" in page
