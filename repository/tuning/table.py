"""The tuner's results as a plain-text table (``manage.py tune`` prints it; docs quote it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

COLUMNS = (
    ("setting", 44),
    ("p50 ms", 8),
    ("p95 ms", 8),
    ("p99 ms", 8),
    ("req/s", 8),
    ("queue ms", 9),
    ("infer ms", 9),
    ("knee", 14),
    ("SLO", 5),
)


def results_table(results: Sequence[dict[str, Any]], recommendation: dict[str, Any]) -> str:
    lines = ["".join(f"{name:<{width}}" for name, width in COLUMNS)]
    for r in results:
        knee = r.get("knee") or {}
        cells = (
            r["setting"]["label"],
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['throughput_per_s']:.0f}",
            f"{r['queue_ms']:.3f}",
            f"{r['compute_infer_ms']:.3f}",
            f"c{knee.get('concurrency', 0)}: {knee.get('throughput_per_s', 0):.0f}/s",
            "yes" if r["meets_slo"] else "no",
        )
        lines.append("".join(f"{c:<{w}}" for c, (_, w) in zip(cells, COLUMNS, strict=True)))
    chosen = recommendation.get("setting")
    lines.append("")
    lines.append(f"recommended: {chosen['label'] if chosen else 'nothing'}")
    lines.append(f"why: {recommendation.get('why', '')}")
    generators = sorted({r.get("generator", "built-in") for r in results})
    if generators:
        lines.append(f"load generator: {', '.join(generators)}")
    return "\n".join(lines)
