"""The sweep's plan, its config edits, the knee and the recommendation: pure functions."""

from __future__ import annotations

from typing import Any

from repository.config.parse import parse_config_text
from repository.demo_models import TensorDecl, build_config
from repository.tuning.recommend import recommend, setting_summary
from repository.tuning.sweep import Setting, knee, plan, tuned_config_text

SLO = {"percentile": 95, "latency_ms": 10.0, "max_error_rate": 0.01, "expected_rate_per_s": 100}
BATCHED = build_config(
    "m",
    platform="onnxruntime_onnx",
    max_batch_size=8,
    inputs=[TensorDecl("x", "FP32", (4,))],
    outputs=[TensorDecl("y", "FP32", (4,))],
    instance_kind="KIND_CPU",
)


def point(throughput: float, p95: float, errors: float = 0.0) -> dict[str, Any]:
    return {
        "throughput_per_s": throughput,
        "p50_ms": p95 / 2,
        "p95_ms": p95,
        "p99_ms": p95 * 1.2,
        "queue_ms": 0.1,
        "compute_input_ms": 0.0,
        "compute_infer_ms": 1.0,
        "compute_output_ms": 0.0,
        "error_rate": errors,
        "requests": 100,
    }


def test_waits_derive_from_the_measured_compute_time() -> None:
    settings = plan(
        config_text=BATCHED,
        compute_ms=0.4,
        batching=["off", "low", "high"],
        instances=[1, 2],
        preferred_batch_sizes=[],
    )
    assert settings[0] == Setting("off", 1)
    assert {(s.batching, s.max_queue_delay_us) for s in settings} == {
        ("off", 0),
        ("low", 200),
        ("high", 800),
    }
    assert len(settings) == 6


def test_a_model_that_cannot_batch_is_swept_over_instances_only() -> None:
    unbatched = BATCHED.replace("max_batch_size: 8", "max_batch_size: 0")
    settings = plan(
        config_text=unbatched,
        compute_ms=1.0,
        batching=["off", "low", "high"],
        instances=[1, 2],
        preferred_batch_sizes=[4],
    )
    assert [(s.batching, s.instances) for s in settings] == [("off", 1), ("off", 2)]


def test_tuned_config_changes_only_batching_and_instance_count() -> None:
    tuned = parse_config_text(tuned_config_text(BATCHED, Setting("high", 3, 800, (4, 8))))
    assert tuned.dynamic_batching.max_queue_delay_microseconds == 800
    assert list(tuned.dynamic_batching.preferred_batch_size) == [4, 8]
    assert [(g.count, g.kind) for g in tuned.instance_group] == [(3, 2)]  # KIND_CPU kept
    off = parse_config_text(
        tuned_config_text(tuned_config_text(BATCHED, Setting("high", 3, 800)), Setting("off", 1))
    )
    assert not off.HasField("dynamic_batching")
    original = parse_config_text(BATCHED)
    original.instance_group[0].count = 1
    assert off == original


def test_knee_is_where_doubling_concurrency_stops_paying() -> None:
    curve = [point(100, 1), point(190, 1.5), point(200, 3), point(260, 6)]
    assert knee(curve) is curve[1]


def test_recommends_the_most_throughput_within_the_slo_and_says_why() -> None:
    slow = setting_summary(
        setting=Setting("off", 1).as_dict(), at_rate=point(100, 12), curve=[point(120, 12)], slo=SLO
    )
    good = setting_summary(
        setting=Setting("low", 1, 200).as_dict(),
        at_rate=point(100, 4),
        curve=[point(150, 4), point(400, 9), point(420, 20)],
        slo=SLO,
    )
    fine = setting_summary(
        setting=Setting("high", 2, 800).as_dict(),
        at_rate=point(100, 6),
        curve=[point(150, 6), point(300, 9)],
        slo=SLO,
    )
    assert not slow["meets_slo"] and good["capacity_per_s"] == 400
    chosen = recommend([slow, good, fine], SLO)
    assert chosen["setting"] == good["setting"]
    assert "400 req/s" in chosen["why"] and "1 setting(s) missed the SLO" in chosen["why"]


def test_no_setting_within_the_slo_recommends_nothing_and_names_the_closest() -> None:
    slow = setting_summary(
        setting=Setting("off", 1).as_dict(), at_rate=point(100, 12), curve=[point(120, 12)], slo=SLO
    )
    chosen = recommend([slow], SLO)
    assert chosen["setting"] is None and "batching off × 1 instance at p95 12.0 ms" in chosen["why"]
