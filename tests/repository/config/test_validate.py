"""Every validation rule, with the message that names its field; all problems are collected."""

from __future__ import annotations

import pytest

from repository.config import ConfigError, config_problems, parse_config_text, validate_config

pytestmark = pytest.mark.embedded

IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ONNX = 'name: "m" platform: "onnxruntime_onnx" backend: "onnxruntime" max_batch_size: 8\n'


def problems(text: str) -> list[str]:
    return config_problems(parse_config_text(text))


def test_valid_config_has_no_problems() -> None:
    assert problems(ONNX + IO) == []
    validate_config(parse_config_text(ONNX + IO))


CASES = [
    # identity and platform
    ('platform: "onnxruntime_onnx"' + IO, "name: must specify the model name"),
    ('name: "a/b" backend: "python"' + IO, "name: invalid model name 'a/b'"),
    ('name: "m"' + IO, "platform: must specify 'platform' or 'backend'"),
    (
        'name: "m" platform: "onnxruntime_onnx" backend: "pytorch"' + IO,
        "platform: unexpected 'platform' and 'backend' pair, got: onnxruntime_onnx, pytorch",
    ),
    ('name: "m" backend: "python" max_batch_size: -1' + IO, "max_batch_size: must be >= 0, got -1"),
    # inputs and outputs
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: 1 } '
        'input { name: "A" data_type: TYPE_FP32 dims: 1 }',
        "input[1].name: duplicate input name 'A'",
    ),
    (ONNX + "input { data_type: TYPE_FP32 dims: 1 }", "input[0].name: must not be empty"),
    (ONNX + 'output { name: "O" dims: 1 }', "output[0].data_type: must specify a data type"),
    (ONNX + 'input { name: "A" data_type: TYPE_FP32 }', "input[0].dims: must specify dims"),
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: [ 2, 0 ] }',
        "input[0].dims: dimension must be an integer >= 1, or -1 for a variable size, got 0",
    ),
    (
        ONNX + 'output { name: "O" data_type: TYPE_FP32 dims: [ -2 ] }',
        "output[0].dims: dimension must be an integer >= 1",
    ),
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape { shape: [ 5 ] } }',
        "input[0].reshape: shape [5] does not have the same number of elements as dims [2, 3]",
    ),
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape { shape: [ 3 ] } }',
        "input[0].reshape: must have the same number of variable-size dimensions as dims",
    ),
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ 0 ] } }',
        "input[0].reshape.shape: dimension must be an integer >= 1, or -1, got 0",
    ),
    (
        ONNX + 'input { name: "A" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224 ] }',
        "input[0].format: FORMAT_NCHW requires 3 dims (without the batch dim), got 2",
    ),
    (
        ONNX + 'output { name: "O" data_type: TYPE_FP32 dims: 1 label_filename: "../x.txt" }',
        "output[0].label_filename: must be a file name inside the model folder, got '../x.txt'",
    ),
    (
        ONNX + 'input { name: "A" data_type: TYPE_INT64 dims: 1 is_shape_tensor: true }',
        "input[0].is_shape_tensor: only allowed for TensorRT models",
    ),
    (
        'name: "m" platform: "tensorrt_plan"'
        'input { name: "A" data_type: TYPE_INT64 dims: 1 is_shape_tensor: true }',
        "input[0].is_shape_tensor: not supported by Portico",
    ),
    # version policy
    (
        ONNX + IO + "version_policy { latest { } }",
        "version_policy.latest.num_versions: must be >= 1",
    ),
    (
        ONNX + IO + "version_policy { specific { } }",
        "version_policy.specific.versions: must list at least one version",
    ),
    (
        ONNX + IO + "version_policy { specific { versions: [ -3 ] } }",
        "version_policy.specific.versions: invalid version -3",
    ),
    # instance groups
    (
        ONNX + IO + 'instance_group { name: "g" } instance_group { name: "g" }',
        "instance_group[1].name: duplicate instance group name 'g'",
    ),
    (ONNX + IO + "instance_group { count: -1 }", "instance_group[0].count: must be >= 0, got -1"),
    (
        ONNX + IO + "instance_group { kind: KIND_CPU gpus: [ 0 ] }",
        "instance_group[0].gpus: GPUs must not be listed for KIND_CPU instance groups",
    ),
    (
        ONNX + IO + "instance_group { kind: KIND_GPU gpus: [ -1 ] }",
        "instance_group[0].gpus: invalid GPU id -1",
    ),
    (
        ONNX + IO + "instance_group { rate_limiter { priority: 1 } }",
        "instance_group[0].rate_limiter: the rate limiter is not supported by Portico",
    ),
    (
        ONNX + IO + "instance_group { passive: true }",
        "instance_group[0].passive: passive instances are not supported by Portico",
    ),
    (
        ONNX + IO + 'instance_group { host_policy: "numa" }',
        "instance_group[0].host_policy: not supported by Portico",
    ),
    (
        ONNX + IO + 'instance_group { profile: "0" }',
        "instance_group[0].profile: only TensorRT plans have optimisation profiles",
    ),
    (
        'name: "p" platform: "tensorrt_plan" max_batch_size: 8 '
        + IO
        + 'instance_group { kind: KIND_GPU profile: "first" }',
        "instance_group[0].profile: 'first' is not a profile index (a number from 0)",
    ),
    # dynamic batching
    (
        ONNX + IO + "dynamic_batching { preferred_batch_size: [ 4, 16 ] }",
        "dynamic_batching.preferred_batch_size: preferred batch size 16 must be in "
        "[1, max_batch_size=8]",
    ),
    (
        'name: "m" backend: "python" max_batch_size: 0'
        + IO
        + "dynamic_batching { preferred_batch_size: [ 1 ] }",
        "preferred batch size 1 must be in [1, max_batch_size=0]",
    ),
    (
        ONNX + IO + "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        "dynamic_batching.default_priority_level: must be in [1, 2] (priority_levels), got 3",
    ),
    (
        ONNX + IO + "dynamic_batching { priority_levels: 2 }",
        "dynamic_batching.default_priority_level: must be in [1, 2] (priority_levels), got 0",
    ),
    (
        ONNX + IO + "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 5 value { } } }",
        "dynamic_batching.priority_queue_policy: priority level 5 must be in [1, 2]",
    ),
    (
        ONNX + IO + "dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }",
        "dynamic_batching.preserve_ordering: cannot be combined with more than one priority level",
    ),
    (
        ONNX + IO + "dynamic_batching { preserve_ordering: true "
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }",
        "dynamic_batching.preserve_ordering: cannot be combined with timeout_action DELAY",
    ),
    # sequence batching
    (
        ONNX + IO + 'sequence_batching { control_input { name: "S" } }',
        "sequence_batching.control_input[0].control: must have exactly one control",
    ),
    (
        ONNX + IO + "sequence_batching { control_input { control { kind: CONTROL_SEQUENCE_START "
        "int32_false_true: [ 0, 1 ] } } }",
        "sequence_batching.control_input[0].name: must not be empty",
    ),
    (
        ONNX + IO + 'sequence_batching { control_input { name: "S" control { '
        "kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } } }",
        "control_input[0].control: CONTROL_SEQUENCE_START must specify exactly one",
    ),
    (
        ONNX + IO + 'sequence_batching { control_input { name: "S" control { '
        "kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } } }",
        "CONTROL_SEQUENCE_START must specify exactly one of int32_false_true",
    ),
    (
        ONNX + IO + 'sequence_batching { control_input { name: "C" control { '
        "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } } }",
        "sequence_batching.control_input[0].control.data_type: CONTROL_SEQUENCE_CORRID must be",
    ),
    (
        ONNX + IO + 'sequence_batching { control_input { name: "C" control { '
        "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ] } } }",
        "CONTROL_SEQUENCE_CORRID must not specify false/true values",
    ),
    (
        ONNX + IO + 'sequence_batching { control_input { name: "A" control { '
        "kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } } "
        'control_input { name: "B" control { kind: CONTROL_SEQUENCE_END '
        "bool_false_true: [ false, true ] } } }",
        "sequence_batching.control_input[1].control: CONTROL_SEQUENCE_END is already given by 'A'",
    ),
    (
        ONNX + IO + "sequence_batching { oldest { preferred_batch_size: [ 9 ] } }",
        "sequence_batching.oldest.preferred_batch_size: preferred batch size 9 must be in",
    ),
    (
        ONNX + IO + 'sequence_batching { state { input_name: "a" output_name: "" } }',
        "sequence_batching.state[0]: input_name and output_name must not be empty",
    ),
    (
        ONNX + IO + 'sequence_batching { state { input_name: "a" output_name: "b" '
        "use_growable_memory: true } }",
        "sequence_batching.state[0].use_growable_memory: not supported by Portico",
    ),
    (
        ONNX + IO + "sequence_batching { iterative_sequence: true }",
        "sequence_batching.iterative_sequence: not supported by Portico",
    ),
    # warmup
    (
        ONNX + IO + 'model_warmup { name: "w" batch_size: 9 inputs { key: "INPUT0" '
        "value { data_type: TYPE_FP32 dims: 4 zero_data: true } } }",
        "model_warmup[0].batch_size: must be in [1, 8], got 9",
    ),
    (
        ONNX + IO + 'model_warmup { batch_size: 1 inputs { key: "INPUT0" '
        "value { data_type: TYPE_FP32 dims: 4 zero_data: true } } }",
        "model_warmup[0].name: must not be empty",
    ),
    (
        ONNX + IO + 'model_warmup { name: "w" batch_size: 1 inputs { key: "NOPE" '
        "value { data_type: TYPE_FP32 dims: 4 random_data: true } } }",
        "model_warmup[0].inputs['NOPE']: 'NOPE' is not an input of the model",
    ),
    (
        ONNX + IO + 'model_warmup { name: "w" batch_size: 1 inputs { key: "INPUT0" '
        "value { data_type: TYPE_FP32 dims: -1 zero_data: true } } }",
        "model_warmup[0].inputs['INPUT0'].dims: warm-up dims must all be >= 1",
    ),
    (
        ONNX + IO + 'model_warmup { name: "w" batch_size: 1 inputs { key: "INPUT0" '
        "value { data_type: TYPE_FP32 dims: 4 } } }",
        "model_warmup[0].inputs['INPUT0']: must specify zero_data, random_data or input_data_file",
    ),
    (
        ONNX + IO + 'model_warmup { name: "w" batch_size: 1 inputs { key: "INPUT0" '
        'value { data_type: TYPE_FP32 dims: 4 input_data_file: "/etc/passwd" } } }',
        "model_warmup[0].inputs['INPUT0'].input_data_file: must be a file name inside",
    ),
    # everything else
    (
        ONNX + IO + 'default_model_filename: "../model.onnx"',
        "default_model_filename: must be a file name",
    ),
    (
        ONNX + IO + "model_transaction_policy { decoupled: true }",
        "model_transaction_policy.decoupled: only Python backend models can be decoupled",
    ),
    (
        ONNX + IO + "response_cache { enable: true }",
        "response_cache.enable: the response cache is not supported by Portico",
    ),
    (
        'name: "m" platform: "tensorflow_savedmodel"' + IO,
        "platform: 'tensorflow_savedmodel' is not supported by Portico",
    ),
    ('name: "m" backend: "openvino"' + IO, "backend: 'openvino' is not supported by Portico"),
    ('name: "m" platform: "torch_aoti"' + IO, "platform: 'torch_aoti' is not supported by Portico"),
    (
        'name: "m" backend: "python" runtime: "custom.so"' + IO,
        "runtime: a custom backend runtime ('custom.so') is not supported",
    ),
    (
        ONNX + IO + 'cc_model_filenames { key: "8.0" value: "a.onnx" }',
        "cc_model_filenames: not supported by Portico",
    ),
    (ONNX + IO + 'batch_input { target_name: "X" }', "batch_input: not supported by Portico"),
    (ONNX + IO + 'batch_output { target_name: "X" }', "batch_output: not supported by Portico"),
    (
        ONNX + IO + 'model_operations { op_library_filename: "x.so" }',
        "model_operations.op_library_filename: not supported by Portico",
    ),
    (
        ONNX + IO + 'model_repository_agents { agents { name: "checksum" } }',
        "model_repository_agents: not supported by Portico",
    ),
    (
        ONNX + IO + "model_metrics { metric_control { histogram_options { buckets: 1 } } }",
        "model_metrics: custom metric histograms are not supported by Portico",
    ),
    (
        ONNX
        + IO
        + "optimization { execution_accelerators { "
        + 'gpu_execution_accelerator { name: "openvino" } } }',
        "optimization.execution_accelerators.gpu_execution_accelerator[0].name: 'openvino' is "
        "not supported",
    ),
    (
        ONNX
        + IO
        + "optimization { execution_accelerators { "
        + 'cpu_execution_accelerator { name: "openvino" } } }',
        "optimization.execution_accelerators.cpu_execution_accelerator[0]: 'openvino' is not "
        "supported by Portico",
    ),
    (
        ONNX + IO + "optimization { cuda { graphs: true } }",
        "optimization.cuda.graphs: CUDA graphs are not supported by Portico",
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[1][:60] for c in CASES])
def test_rule_reports_problem_naming_its_field(text: str, expected: str) -> None:
    found = problems(text)
    assert any(expected in p for p in found), found


ENSEMBLE = """
name: "e" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: 4 } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: 4 } ]
"""


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'step {{ model_name: "{model}" model_version: -1 {ins} {outs} }}'


def _ensemble(*steps: str, extra: str = "") -> str:
    return ENSEMBLE + "ensemble_scheduling { " + " ".join(steps) + " }" + extra


def test_valid_ensemble_steps_in_any_order() -> None:
    text = _ensemble(_step("b", {"X": "mid"}, {"Y": "OUT"}), _step("a", {"X": "IN"}, {"Y": "mid"}))
    assert problems(text) == []


ENSEMBLE_CASES = [
    (ENSEMBLE, "ensemble_scheduling: an ensemble must specify ensemble_scheduling"),
    (_ensemble(), "ensemble_scheduling.step: an ensemble must have at least one step"),
    (
        _ensemble(_step("a", {"X": "nowhere"}, {"Y": "OUT"})),
        "ensemble_scheduling.step[0].input_map: 'X' reads tensor 'nowhere', which is neither",
    ),
    (
        _ensemble(_step("a", {"X": "IN"}, {"Y": "other"})),
        "output: ensemble output 'OUT' is not produced by any step",
    ),
    (
        ENSEMBLE.replace("input [", 'input [ { name: "UNUSED" data_type: TYPE_FP32 dims: 1 },')
        + "ensemble_scheduling { "
        + _step("a", {"X": "IN"}, {"Y": "OUT"})
        + " }",
        "input: ensemble input 'UNUSED' is not used by any step",
    ),
    (
        _ensemble(_step("a", {"X": "IN"}, {"Y": "OUT"}), _step("b", {"X": "IN"}, {"Y": "OUT"})),
        "ensemble_scheduling.step[1].output_map: tensor 'OUT' is written more than once",
    ),
    (
        _ensemble(
            _step("a", {"X": "IN", "Z": "t2"}, {"Y": "t1"}),
            _step("b", {"X": "t1"}, {"Y": "t2"}),
            _step("c", {"X": "t1"}, {"Y": "OUT"}),
        ),
        "circular dependency between steps",
    ),
    (
        _ensemble(_step("", {"X": "IN"}, {"Y": "OUT"})),
        "ensemble_scheduling.step[0].model_name: must not be empty",
    ),
    (
        _ensemble(_step("a", {"X": "IN"}, {})),
        "ensemble_scheduling.step[0]: input_map and output_map must not be empty",
    ),
    (
        _ensemble(
            _step("a", {"X": "IN"}, {"Y": "OUT"}), extra=" instance_group { kind: KIND_CPU }"
        ),
        "instance_group: not allowed for an ensemble",
    ),
    (
        'name: "m" backend: "python"' + IO + "ensemble_scheduling { }",
        "ensemble_scheduling: requires platform 'ensemble'",
    ),
    (
        ENSEMBLE.replace('platform: "ensemble"', 'platform: "ensemble" backend: "python"')
        + "ensemble_scheduling { "
        + _step("a", {"X": "IN"}, {"Y": "OUT"})
        + " }",
        "platform: unexpected 'platform' and 'backend' pair, got: ensemble, python",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), ENSEMBLE_CASES, ids=[c[1][:60] for c in ENSEMBLE_CASES]
)
def test_ensemble_rule_reports_problem(text: str, expected: str) -> None:
    found = problems(text)
    assert any(expected in p for p in found), found


def test_all_problems_are_collected_in_one_error() -> None:
    text = (
        'name: "m" platform: "onnxruntime_onnx" max_batch_size: -2 '
        'input { name: "A" dims: [ 0 ] } output { name: "B" data_type: TYPE_FP32 } '
        "response_cache { enable: true }"
    )
    with pytest.raises(ConfigError) as info:
        validate_config(parse_config_text(text))
    fields = [p.split(":")[0] for p in info.value.problems]
    assert fields == [
        "max_batch_size",
        "input[0].data_type",
        "input[0].dims",
        "output[0].dims",
        "response_cache.enable",
    ]
    assert str(info.value).count(";") == 4


def test_scalar_with_batch_uses_empty_reshape() -> None:
    text = ONNX + 'input { name: "A" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } }'
    assert problems(text) == []


def test_reshape_with_variable_dims_checks_fixed_parts() -> None:
    ok = (
        ONNX
        + 'input { name: "A" data_type: TYPE_FP32 dims: [ -1, 2, 3 ] reshape { shape: [ -1, 6 ] } }'
    )
    assert problems(ok) == []
    bad = (
        ONNX
        + 'input { name: "A" data_type: TYPE_FP32 dims: [ -1, 2, 3 ] reshape { shape: [ -1, 5 ] } }'
    )
    assert any("same number of elements" in p for p in problems(bad))


def test_triton_tolerances_are_kept() -> None:
    # A priority level without priority levels is ignored by Triton, and DELAY without a timeout
    # never delays anything; both load there, so they load here.
    assert problems(ONNX + IO + "dynamic_batching { default_priority_level: 1 }") == []
    text = "dynamic_batching { preserve_ordering: true "
    text += "default_queue_policy { timeout_action: DELAY } }"
    assert problems(ONNX + IO + text) == []
