"""What the worker does with a claimed job: one load test, or a tuning sweep that records each
setting as it finishes (a resumed tuning skips the settings already in its row)."""

from __future__ import annotations

from typing import Any

from repository.models import LoadTest, Tuning
from repository.tuning.loadgen import Shape
from repository.tuning.recommend import recommend, setting_summary
from repository.tuning.runner import Workbench, job_claim, job_execute
from repository.tuning.sweep import (
    Setting,
    concurrency_levels,
    curve_done,
    plan,
    probe_setting,
    tuned_config_text,
)


def load_test_run(*, job_id: int) -> LoadTest | None:
    """Run a queued (or abandoned) load test; a finished or missing one is a no-op."""
    job = job_claim(LoadTest, job_id)
    if job is None:
        return None
    assert isinstance(job, LoadTest)
    job_execute(job, _load_test)
    return job


def tuning_run(*, job_id: int) -> Tuning | None:
    """Run a queued (or abandoned, then resumed) tuning; a finished or missing one is a no-op."""
    job = job_claim(Tuning, job_id)
    if job is None:
        return None
    assert isinstance(job, Tuning)
    job_execute(job, _tuning)
    return job


def _load_test(bench: Workbench) -> None:
    job = bench.job
    p = job.parameters
    shape = Shape(
        mode=p["mode"],
        duration_s=float(p["duration_s"]),
        rate_per_s=float(p.get("rate_per_s") or 0),
        concurrency=int(p["concurrency"]),
    )
    with bench.serve(job.version.config_text) as server:
        result = bench.run(server, shape, 0.05, f"measuring at {shape.describe()}")
    assert isinstance(job, LoadTest)
    job.result = {**result.as_dict(), "inputs": bench.inputs_source}
    job.save(update_fields=["result"])


def _tuning(bench: Workbench) -> None:
    job = bench.job
    assert isinstance(job, Tuning)
    p, config = job.parameters, job.version.config_text
    settings = [probe_setting()]
    index = 0
    while index < len(settings):
        if index >= len(job.results):
            job.results = [
                *job.results,
                _measure_setting(bench, settings[index], index, _planned(p, len(settings))),
            ]
            job.save(update_fields=["results"])
        if index == 0:
            compute_ms = _compute_ms(job.results[0])
            settings = plan(
                config_text=config,
                compute_ms=compute_ms,
                batching=p["batching"],
                instances=p["instances"],
                preferred_batch_sizes=p["preferred_batch_sizes"],
            )
        index += 1
    job.results = [r for r in job.results if Setting.from_dict(r["setting"]) in settings]
    job.recommendation = recommend(job.results, job.slo)
    job.save(update_fields=["results", "recommendation"])


def _measure_setting(bench: Workbench, setting: Setting, index: int, total: int) -> dict[str, Any]:
    job = bench.job
    assert isinstance(job, Tuning)
    p, slo = job.parameters, job.slo
    rate = float(slo.get("expected_rate_per_s") or 0)
    levels = concurrency_levels(int(p["max_concurrency"]))
    steps = len(levels) + (1 if rate else 0)
    duration = float(p["duration_s"])

    def progress(step: int) -> float:
        return (index + step / steps) / total

    at_rate, curve = None, []
    with bench.serve(tuned_config_text(job.version.config_text, setting)) as server:
        if rate:
            shape = Shape(mode="rate", duration_s=duration, rate_per_s=rate)
            at_rate = bench.run(
                server, shape, progress(0), f"{setting.label}: {shape.describe()}"
            ).as_dict()
        for step, level in enumerate(levels, start=1 if rate else 0):
            shape = Shape(mode="concurrency", duration_s=duration, concurrency=level)
            curve.append(
                bench.run(
                    server, shape, progress(step), f"{setting.label}: {shape.describe()}"
                ).as_dict()
            )
            if curve_done(curve, slo):
                break
    return setting_summary(setting=setting.as_dict(), at_rate=at_rate, curve=curve, slo=slo)


def _compute_ms(probe: dict[str, Any]) -> float:
    """One execution's compute time with batching off: the least over the probe's runs, since a
    busy machine only ever adds to it."""
    runs = [*probe["curve"], *([probe["at_rate"]] if probe["at_rate"] else [])]
    phases = ("compute_input_ms", "compute_infer_ms", "compute_output_ms")
    return min((sum(run[p] for p in phases) for run in runs if run["requests"]), default=0.0)


def _planned(parameters: dict[str, Any], known: int) -> int:
    """How many settings the sweep will measure: before the probe has planned them, as many as
    the parameters can make (so the progress bar never runs backwards)."""
    if known > 1:
        return known
    options = 2 if parameters["preferred_batch_sizes"] else 1
    return max(known, len(parameters["batching"]) * len(parameters["instances"]) * options)
