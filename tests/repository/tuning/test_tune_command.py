"""``manage.py tune`` runs the sweep in the foreground on the real serving code and prints the
table; versions whose code is not approved are refused before anything runs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from repository.demo_models import write_onnx_mlp, write_python_add_sub
from repository.models import Event, Tuning

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]


def test_tune_prints_every_setting_and_a_recommendation_within_the_slo(model_repo: Path) -> None:
    write_onnx_mlp(model_repo, "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    call_command("import_repository", str(model_repo), sync=True, stdout=io.StringIO())
    out = io.StringIO()
    call_command(
        "tune",
        "mlp",
        "1",
        "--slo-p95-ms",
        "2000",
        "--rate",
        "20",
        "--duration",
        "0.3",
        "--instances",
        "1",
        "--batching",
        "off",
        "high",
        "--max-concurrency",
        "2",
        stdout=out,
        stderr=io.StringIO(),
    )
    table = out.getvalue()
    assert table.splitlines()[0].startswith("setting")
    assert "batching off × 1 instance" in table and "batching high (" in table
    assert "recommended: batching" in table, table
    job = Tuning.objects.get()
    assert job.state == "succeeded" and len(job.results) == 2
    assert all(r["at_rate"]["requests"] > 0 and r["p95_ms"] > 0 for r in job.results)
    assert Event.objects.filter(action="tuning_start").exists()


def test_tune_refuses_code_that_is_not_approved(model_repo: Path) -> None:
    write_python_add_sub(model_repo, "addsub")
    call_command("import_repository", str(model_repo), sync=True, stdout=io.StringIO())
    with pytest.raises(CommandError, match="must approve it first"):
        call_command("tune", "addsub", "1", "--slo-p95-ms", "50", stdout=io.StringIO())
    assert not Tuning.objects.exists()
