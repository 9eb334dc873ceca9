"""Run Triton's perf_analyzer against a Portico server and read back its CSV."""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class PerfAnalyzerMissing(RuntimeError):
    pass


class UnstableMeasurement(RuntimeError):
    """perf_analyzer found no three windows that agree within the asked stability."""


@dataclasses.dataclass(frozen=True)
class LoadResult:
    """One perf_analyzer measurement at one concurrency."""

    protocol: str
    concurrency: int
    throughput_per_s: float
    p50_us: float
    p95_us: float
    p99_us: float
    queue_us: float
    compute_us: float
    stable: bool = True


def find_perf_analyzer() -> str:
    """perf_analyzer from PERF_ANALYZER, else from PATH."""
    explicit = os.environ.get("PERF_ANALYZER")
    if explicit:
        return explicit
    found = shutil.which("perf_analyzer")
    if found:
        return found
    raise PerfAnalyzerMissing(
        "perf_analyzer not found: pip install perf-analyzer, or set PERF_ANALYZER to its path"
    )


def run_load(
    *,
    model: str,
    protocol: str,
    url: str,
    concurrency: int,
    shape: str | None = None,
    measurement_ms: int = 3000,
    extra_args: tuple[str, ...] = (),
    any_spread: bool = False,
) -> LoadResult:
    """Measure ``model`` at a fixed concurrency; latencies from the client's point of view.

    perf_analyzer first asks for three windows within 30 % of each other; on a busy machine that
    may never happen, so it then measures again accepting any spread, and the result says so.
    ``any_spread`` skips the first attempt (for callers that measure something else meanwhile).
    """
    if any_spread:
        result = _run_load(model=model, protocol=protocol, url=url, concurrency=concurrency,
                           shape=shape, measurement_ms=measurement_ms, extra_args=extra_args,
                           stability_percentage=10_000)  # fmt: skip
        return dataclasses.replace(result, stable=False)
    try:
        return _run_load(model=model, protocol=protocol, url=url, concurrency=concurrency,
                         shape=shape, measurement_ms=measurement_ms, extra_args=extra_args,
                         stability_percentage=30)  # fmt: skip
    except UnstableMeasurement:
        result = _run_load(model=model, protocol=protocol, url=url, concurrency=concurrency,
                           shape=shape, measurement_ms=measurement_ms, extra_args=extra_args,
                           stability_percentage=10_000)  # fmt: skip
        return dataclasses.replace(result, stable=False)


def _run_load(
    *,
    model: str,
    protocol: str,
    url: str,
    concurrency: int,
    shape: str | None,
    measurement_ms: int,
    extra_args: tuple[str, ...],
    stability_percentage: int,
) -> LoadResult:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.csv"
        command = [
            find_perf_analyzer(),
            "-m",
            model,
            "-i",
            protocol,
            "-u",
            url,
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            "--measurement-interval",
            str(measurement_ms),
            "--stability-percentage",
            str(stability_percentage),
            "--max-trials",
            "10",
            "--percentile",
            "99",
            "-f",
            str(report),
            *extra_args,
        ]
        if shape:
            command += ["--shape", shape]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
        output = completed.stdout + completed.stderr
        if completed.returncode != 0 and "stable measurement" in output:
            raise UnstableMeasurement(model)
        if completed.returncode != 0:
            raise RuntimeError(
                f"perf_analyzer failed (exit status {completed.returncode}):\n"
                f"{completed.stdout}\n{completed.stderr}"
            )
        with report.open() as handle:
            row = next(csv.DictReader(handle))
    return LoadResult(
        protocol=protocol,
        concurrency=concurrency,
        throughput_per_s=float(row["Inferences/Second"]),
        p50_us=float(row["p50 latency"]),
        p95_us=float(row["p95 latency"]),
        p99_us=float(row["p99 latency"]),
        queue_us=float(row.get("Server Queue") or 0),
        compute_us=sum(
            float(row.get(column) or 0)
            for column in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
        ),
    )
