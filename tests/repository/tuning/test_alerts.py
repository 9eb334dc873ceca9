"""``manage.py slo_alerts`` writes Prometheus alerting rules from the SLOs: two windows per
objective, over metrics serving really exports; checked by ``promtool`` when it is installed and
always against the rules-file schema."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from repository.tuning.services import slo_set
from serving.observability import metrics
from tests.factories import ModelFactory

pytestmark = pytest.mark.django_db

DURATION = re.compile(r"^\d+[smh]$")


def written_rules(tmp_path: Path) -> tuple[Path, dict]:  # type: ignore[type-arg]
    slo_set(model=ModelFactory(name="mlp"), actor=None, latency_ms=50, expected_rate_per_s=200)
    slo_set(
        model=ModelFactory(name="ranker"),
        actor=None,
        latency_ms=20,
        percentile=99,
        max_error_rate=0.01,
    )
    target = tmp_path / "alerts.yml"
    call_command("slo_alerts", "--output", str(target), stderr=io.StringIO())
    return target, yaml.safe_load(target.read_text())


def test_each_slo_gets_burning_and_breached_rules_for_latency_and_errors(tmp_path: Path) -> None:
    _, rules = written_rules(tmp_path)
    assert [g["name"] for g in rules["groups"]] == ["portico-slo-mlp", "portico-slo-ranker"]
    ranker = rules["groups"][1]["rules"]
    assert {r["alert"] for r in ranker} == {
        "PorticoSloLatencyBurning",
        "PorticoSloErrorsBurning",
        "PorticoSloLatencyBreached",
        "PorticoSloErrorsBreached",
    }
    latency = next(r for r in ranker if r["alert"] == "PorticoSloLatencyBreached")
    assert latency["expr"].startswith("histogram_quantile(0.99,")
    assert "[1h]" in latency["expr"] and latency["expr"].endswith("> 20")
    assert latency["labels"] == {"severity": "page", "model": "ranker"}


def test_rules_match_the_rules_file_schema_and_name_exported_metrics(tmp_path: Path) -> None:
    _, rules = written_rules(tmp_path)
    exported = {name for name, *_ in metrics._HISTOGRAMS} | {
        "nv_inference_request_failure",
        "nv_inference_request_success",
    }
    for group in rules["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert DURATION.match(rule["for"])
            assert rule["expr"].count("(") == rule["expr"].count(")")
            names = set(re.findall(r"\b((?:nv|portico)_[a-z_]+?)(?:_bucket)?\{", rule["expr"]))
            assert names and names <= exported, names


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus); the schema test ran")
    path, _ = written_rules(tmp_path)
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout


def test_shipped_rules_are_those_of_the_demo_slo() -> None:
    from console.platform_setup import DEMO_MLP_SLO
    from repository.tuning.alerts import alert_rules_yaml

    shipped = Path(__file__).resolve().parents[3] / "deploy" / "alerts.yml"
    assert shipped.read_text() == alert_rules_yaml([{"model": "mlp", **DEMO_MLP_SLO}])
