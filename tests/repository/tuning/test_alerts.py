"""``manage.py slo_alerts`` writes Prometheus alerting rules from the SLOs: two windows per
objective, over metrics serving really exports; always checked against the rules-file schema, and
by Prometheus's own ``promtool`` (which `make install` unpacks into the venv): it parses them, and
its evaluator fires each alert on series that miss the SLO and none on series that meet it."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
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


def promtool_binary() -> str | None:
    """promtool: the one `make install` unpacks into the venv, else an installed one."""
    unpacked = Path(sys.prefix) / "prometheus" / "usr" / "bin" / "promtool"
    return str(unpacked) if unpacked.is_file() else shutil.which("promtool")


PROMTOOL = promtool_binary()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is neither installed nor unpacked into the venv (`make promtool`, from "
    "Debian's prometheus package); the schema test ran",
)


@needs_promtool
def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    path, _ = written_rules(tmp_path)
    checked = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout


def series(model: str, *, ok_per_min: int, failed_per_min: int, slow: bool) -> list[dict]:  # type: ignore[type-arg]
    """70 minutes of a model's counters as serving exports them: every request inside
    (10 ms, 50 ms] when ``slow``, else at most 10 ms."""
    total = ok_per_min + failed_per_min
    fast_bucket = 0 if slow else total
    return [
        {"series": f'nv_inference_request_success{{model="{model}",version="1"}}',
         "values": f"0+{ok_per_min}x70"},
        {"series": f'nv_inference_request_failure{{model="{model}",version="1"}}',
         "values": f"0+{failed_per_min}x70"},
        *({"series": f'portico_inference_request_duration_us_bucket{{model="{model}",'
                     f'version="1",le="{le}"}}',
           "values": f"0+{count}x70"}
          for le, count in (("10000", fast_bucket), ("50000", total), ("+Inf", total))),
    ]  # fmt: skip


def expected(model: str, severity: str, summary: str) -> dict:  # type: ignore[type-arg]
    return {"exp_labels": {"severity": severity, "model": model},
            "exp_annotations": {"summary": summary}}  # fmt: skip


@needs_promtool
def test_promtool_fires_each_alert_when_its_slo_is_missed_and_stays_quiet_otherwise(
    tmp_path: Path,
) -> None:
    """Prometheus's own evaluator on the written rules: ranker (p99 under 20 ms, errors under
    1 %) runs at a p99 of 49.6 ms with 2 % errors and pages on all four rules; mlp (p95 under
    50 ms, errors under 0.1 %) runs at a p95 of 48 ms with 0.05 % errors and stays quiet."""
    path, _ = written_rules(tmp_path)
    ranker = {
        ("PorticoSloLatency", "warning", "5m"): "p99 latency of ranker over 5m is 49.6 ms, above "
        "its SLO of 20 ms",
        ("PorticoSloErrors", "warning", "5m"): "error rate of ranker over 5m is 2%, above its SLO "
        "of 0.01",
        ("PorticoSloLatency", "page", "1h"): "p99 latency of ranker over 1h is 49.6 ms, above "
        "its SLO of 20 ms",
        ("PorticoSloErrors", "page", "1h"): "error rate of ranker over 1h is 2%, above its SLO "
        "of 0.01",
    }
    checks = []
    for (kind, severity, window), summary in ranker.items():
        word = "Burning" if window == "5m" else "Breached"
        checks.append({"eval_time": "70m", "alertname": f"{kind}{word}",
                       "exp_alerts": [expected("ranker", severity, summary)]})  # fmt: skip
    # Burning holds for 2 minutes before it fires: at 2 minutes in it is still pending.
    checks.append({"eval_time": "2m", "alertname": "PorticoSloErrorsBurning", "exp_alerts": []})
    for word in ("Burning", "Breached"):
        for kind in ("PorticoSloLatency", "PorticoSloErrors"):
            checks.append({"eval_time": "70m", "alertname": f"{kind}{word}", "exp_alerts": []})
    unit = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m",
             "input_series": series("ranker", ok_per_min=98, failed_per_min=2, slow=True),
             "alert_rule_test": checks[:5]},
            {"interval": "1m",
             "input_series": series("mlp", ok_per_min=1999, failed_per_min=1, slow=True),
             "alert_rule_test": checks[5:]},
        ],
    }  # fmt: skip
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump(unit, sort_keys=False))
    ran = subprocess.run(
        [str(PROMTOOL), "test", "rules", str(tests)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_shipped_rules_are_those_of_the_demo_slo() -> None:
    from console.platform_setup import DEMO_MLP_SLO
    from repository.tuning.alerts import alert_rules_yaml

    shipped = Path(__file__).resolve().parents[3] / "deploy" / "alerts.yml"
    assert shipped.read_text() == alert_rules_yaml([{"model": "mlp", **DEMO_MLP_SLO}])
