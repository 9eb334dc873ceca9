"""The device stand-in benchmark: its model, and the table it writes."""

import dataclasses
from pathlib import Path

import pytest

from bench import device_standin, report
from bench.perf_analyzer import LoadResult
from tests.serving.backends.specs import spec_for

pytestmark = pytest.mark.embedded


def test_the_model_is_a_batching_python_model_that_sleeps_per_batch(tmp_path: Path) -> None:
    device_standin.write_model(tmp_path)
    spec = spec_for(tmp_path / device_standin.MODEL)
    assert spec.config.backend == "python" and spec.config.max_batch_size == 16
    assert spec.config.dynamic_batching.max_queue_delay_microseconds == 0
    source = (tmp_path / device_standin.MODEL / "1" / "model.py").read_text()
    compile(source, "model.py", "exec")
    assert f"time.sleep({device_standin.EXECUTE_MS} / 1000)" in source


def load(throughput: float, p50: float) -> LoadResult:
    return LoadResult("http", 64, throughput, p50, p50, p50, 0.0, 0.0)


def test_the_table_gives_medians_each_round_and_the_baseline_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "BENCHMARKS_MD", tmp_path / "benchmarks.md")
    runs = {
        ("this tree", "http"): [
            {"load": load(8000, 7500), "handoff_us": 26},
            {"load": load(8200, 7400), "handoff_us": 27},
            {"load": load(7900, 7600), "handoff_us": 25},
        ],
        ("baseline", "http"): [
            {"load": load(5300, 11700), "handoff_us": 740},
            {"load": load(5400, 11600), "handoff_us": 720},
            {"load": load(5500, 11500), "handoff_us": 700},
        ],
    }
    device_standin._write(runs, 3, Path(__file__).parent)
    text = (tmp_path / "benchmarks.md").read_text()
    assert "| this tree | HTTP | 8000 | 7500 | 26 | 8000 / 8200 / 7900 |" in text
    assert "| baseline | HTTP | 5400 | 11600 | 720 | 5300 / 5400 / 5500 |" in text
    assert "the baseline tree is at `" in text and "median of 3 alternating round(s)" in text


def test_a_median_with_an_unstable_round_is_marked() -> None:
    steady, shaky = load(8000, 7500), dataclasses.replace(load(7000, 8000), stable=False)
    assert report.mark_any([steady, steady]) == ""
    assert report.mark_any([steady, shaky, steady]) == " †"
