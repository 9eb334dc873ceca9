"""The shipped Prometheus and Grafana files parse and point at metrics serving really exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from serving.observability import system_metrics

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "kubernetes" / "base" / "grafana-dashboard.json"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def test_grafana_dashboard_panels_are_unique_and_query_prometheus() -> None:
    panels = _dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert all(
        t["datasource"]["type"] == "prometheus" for p in panels for t in p.get("targets", [])
    )


def test_dashboard_uses_triton_names_and_the_system_gauges_serving_emits() -> None:
    names = {n for expr in _exprs() for n in re.findall(r"\b((?:nv|portico)_[a-z_]+)", expr)}
    triton = {"nv_inference_request_success", "nv_inference_request_failure",
              "nv_inference_queue_duration_us", "nv_inference_pending_request_count"}  # fmt: skip
    assert triton <= names
    registry = CollectorRegistry()
    system_metrics.register(registry)
    exposed = generate_latest(registry).decode()
    for name in names & {
        "nv_cpu_utilization",
        "nv_cpu_memory_used_bytes",
        "nv_cpu_memory_total_bytes",
    }:
        assert (
            f"\n{name} " in exposed
            or exposed.startswith(f"{name} ")
            or f"# TYPE {name} " in exposed
        )


def test_prometheus_discovers_the_serving_replicas_by_dns_on_the_compose_service() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    job = config["scrape_configs"][0]
    assert "static_configs" not in job  # no replica is named: --scale serving=N is followed
    [discovery] = job["dns_sd_configs"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert discovery["names"] == ["serving"] and "serving" in compose["services"]
    assert discovery["type"] == "A" and discovery["port"] == 8002
    for service in ("prometheus", "grafana"):
        assert compose["services"][service]["profiles"] == ["monitoring"]


def test_every_metric_the_dashboard_queries_is_declared_by_serving() -> None:
    source = "".join(p.read_text() for p in (ROOT / "serving" / "observability").glob("*.py"))
    names = {n for expr in _exprs() for n in re.findall(r"\b((?:nv|portico)_[a-z_]+)", expr)}
    for name in names:
        family = re.sub(r"_(bucket|total)$", "", name)
        assert f'"{family}' in source or f'"{name}' in source, name
