"""Prometheus alerting rules from the models' SLOs, over the metrics serving exports.

Two windows per objective, as in multi-window SLO alerting: over 5 minutes the SLO is *burning*
(a warning), over an hour it is *breached* (page). Latency comes from the
``portico_inference_request_duration_us`` histogram, errors from Triton's request counters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

WINDOWS = (("5m", "Burning", "warning", "2m"), ("1h", "Breached", "page", "5m"))


def alert_rules(slos: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The rules file as a dict; each SLO dict has ``model`` plus the SLO's fields."""
    return {"groups": [_group(slo) for slo in slos]}


def alert_rules_yaml(slos: Iterable[dict[str, Any]]) -> str:
    header = "# Written by `python manage.py slo_alerts` from the models' SLOs; do not edit.\n"
    return header + yaml.safe_dump(alert_rules(slos), sort_keys=False, width=100)


def _group(slo: dict[str, Any]) -> dict[str, Any]:
    rules = []
    for window, word, severity, hold in WINDOWS:
        rules += [
            _latency_rule(slo, window, word, severity, hold),
            _error_rule(slo, window, word, severity, hold),
        ]
    return {"name": f"portico-slo-{slo['model']}", "rules": rules}


def _latency_rule(
    slo: dict[str, Any], window: str, word: str, severity: str, hold: str
) -> dict[str, Any]:
    model, q = _quoted(slo["model"]), slo["percentile"] / 100
    expr = (
        f"histogram_quantile({q:g}, sum by (le) (rate("
        f'portico_inference_request_duration_us_bucket{{model="{model}"}}[{window}])))'
        f" / 1000 > {slo['latency_ms']:g}"
    )
    return _rule(
        f"PorticoSloLatency{word}",
        expr,
        hold,
        severity,
        slo,
        f"p{slo['percentile']} latency of {slo['model']} over {window} is "
        f"{{{{ $value | humanize }}}} ms, above its SLO of {slo['latency_ms']:g} ms",
    )


def _error_rule(
    slo: dict[str, Any], window: str, word: str, severity: str, hold: str
) -> dict[str, Any]:
    model = _quoted(slo["model"])
    failed = f'sum(rate(nv_inference_request_failure{{model="{model}"}}[{window}]))'
    ok = f'sum(rate(nv_inference_request_success{{model="{model}"}}[{window}]))'
    expr = f"{failed} / ({ok} + {failed}) > {slo['max_error_rate']:g}"
    return _rule(
        f"PorticoSloErrors{word}",
        expr,
        hold,
        severity,
        slo,
        f"error rate of {slo['model']} over {window} is {{{{ $value | humanizePercentage }}}},"
        f" above its SLO of {slo['max_error_rate']:g}",
    )


def _rule(
    name: str, expr: str, hold: str, severity: str, slo: dict[str, Any], summary: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": hold,
        "labels": {"severity": severity, "model": slo["model"]},
        "annotations": {"summary": summary},
    }


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
