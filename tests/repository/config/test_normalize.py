"""Normalisation: the defaults Triton fills in before serving a config."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository.config import ConfigError, config_problems, normalize_config, parse_config_text

pytestmark = pytest.mark.embedded

KIND = mc.ModelInstanceGroup.Kind
BASE = 'name: "m" backend: "onnxruntime" platform: "onnxruntime_onnx" max_batch_size: 8 '


def _groups(cfg: mc.ModelConfig) -> list[tuple[str, str, int, list[int]]]:
    return [(g.name, KIND.Name(g.kind), g.count, list(g.gpus)) for g in cfg.instance_group]


def test_missing_instance_group_becomes_one_named_after_the_model() -> None:
    cfg = normalize_config(parse_config_text(BASE))
    assert _groups(cfg) == [("m", "KIND_CPU", 2, [])]  # onnxruntime CPU groups default to 2


def test_python_cpu_group_defaults_to_one_instance() -> None:
    cfg = normalize_config(parse_config_text('name: "p" backend: "python"'))
    assert _groups(cfg) == [("p", "KIND_CPU", 1, [])]


def test_kind_auto_resolves_to_gpu_when_gpus_exist() -> None:
    cfg = normalize_config(parse_config_text(BASE + "instance_group { count: 1 }"), gpu_count=2)
    assert _groups(cfg) == [("m_0", "KIND_GPU", 1, [0, 1])]


def test_kind_auto_listing_a_missing_gpu_falls_back_to_cpu() -> None:
    cfg = normalize_config(parse_config_text(BASE + "instance_group { gpus: [ 3 ] }"), gpu_count=1)
    assert _groups(cfg)[0][1] == "KIND_CPU"


def test_explicit_groups_keep_names_and_counts() -> None:
    text = (
        BASE
        + 'instance_group { name: "a" kind: KIND_CPU count: 3 } instance_group { kind: KIND_MODEL }'
    )
    cfg = normalize_config(parse_config_text(text))
    assert _groups(cfg) == [("a", "KIND_CPU", 3, []), ("m_1", "KIND_MODEL", 1, [])]


def test_gpu_group_without_gpus_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        normalize_config(parse_config_text(BASE + "instance_group { kind: KIND_GPU }"))
    assert info.value.problems == [
        "instance_group[0].kind: instance group 'm_0' has kind KIND_GPU but no GPUs are available"
    ]


def test_gpu_group_naming_a_missing_gpu_is_an_error() -> None:
    text = BASE + "instance_group { kind: KIND_GPU gpus: [ 0, 4 ] }"
    with pytest.raises(ConfigError, match=r"instance_group\[0\].gpus: .* gpu id 4"):
        normalize_config(parse_config_text(text), gpu_count=2)


def test_groups_keep_what_was_written_when_the_devices_are_unknown() -> None:
    text = (
        BASE
        + "instance_group { kind: KIND_GPU gpus: [ 0, 1 ] count: 2 } instance_group { }"
        + 'instance_group { name: "c" kind: KIND_CPU }'
    )
    cfg = normalize_config(parse_config_text(text), gpu_count=None)
    assert _groups(cfg) == [
        ("m_0", "KIND_GPU", 2, [0, 1]),
        ("m_1", "KIND_AUTO", 0, []),
        ("c", "KIND_CPU", 0, []),
    ]


def test_a_config_kept_as_written_resolves_on_a_gpu_machine_later() -> None:
    kept = normalize_config(parse_config_text(BASE + "instance_group { }"), gpu_count=None)
    assert _groups(normalize_config(kept, gpu_count=2)) == [("m_0", "KIND_GPU", 1, [0, 1])]
    assert _groups(normalize_config(kept, gpu_count=0)) == [("m_0", "KIND_CPU", 2, [])]


def test_version_policy_defaults_to_latest_one() -> None:
    cfg = normalize_config(parse_config_text(BASE))
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    kept = normalize_config(parse_config_text(BASE + "version_policy { all { } }"))
    assert kept.version_policy.WhichOneof("policy_choice") == "all"


def test_preferred_batch_size_defaults_to_max_batch_size() -> None:
    cfg = normalize_config(parse_config_text(BASE + "dynamic_batching { }"))
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    kept = normalize_config(
        parse_config_text(BASE + "dynamic_batching { preferred_batch_size: 2 }")
    )
    assert list(kept.dynamic_batching.preferred_batch_size) == [2]


def test_sequence_idle_default_and_direct_strategy() -> None:
    cfg = normalize_config(parse_config_text(BASE + "sequence_batching { }"))
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert cfg.sequence_batching.WhichOneof("strategy_choice") == "direct"
    kept = normalize_config(
        parse_config_text(
            BASE + "sequence_batching { max_sequence_idle_microseconds: 7 oldest { } }"
        )
    )
    assert kept.sequence_batching.max_sequence_idle_microseconds == 7
    assert kept.sequence_batching.WhichOneof("strategy_choice") == "oldest"


def test_pinned_memory_enabled_unless_written() -> None:
    cfg = normalize_config(parse_config_text(BASE))
    assert cfg.optimization.input_pinned_memory.enable
    assert cfg.optimization.output_pinned_memory.enable
    text = BASE + "optimization { input_pinned_memory { enable: false } }"
    kept = normalize_config(parse_config_text(text))
    assert not kept.optimization.input_pinned_memory.enable
    assert kept.optimization.output_pinned_memory.enable


def test_ensembles_get_no_instance_group_or_pinned_memory() -> None:
    text = 'name: "e" platform: "ensemble"'
    cfg = normalize_config(parse_config_text(text))
    assert len(cfg.instance_group) == 0 and not cfg.HasField("optimization")


def test_normalised_config_stays_valid_and_input_is_not_modified() -> None:
    original = parse_config_text(
        BASE + 'input { name: "I" data_type: TYPE_FP32 dims: 1 } dynamic_batching { }'
    )
    snapshot = mc.ModelConfig()
    snapshot.CopyFrom(original)
    cfg = normalize_config(original)
    assert original == snapshot
    assert config_problems(cfg) == []
    assert normalize_config(cfg) == cfg  # idempotent
