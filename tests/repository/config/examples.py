"""Triton's example configs (server/docs/examples/model_repository and the QA ensembles)."""

SIMPLE = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
"""

SIMPLE_SEQUENCE = """
name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    {
      name: "START"
      control [
        {
          kind: CONTROL_SEQUENCE_START
          int32_false_true: [ 0, 1 ]
        }
      ]
    },
    {
      name: "READY"
      control [
        {
          kind: CONTROL_SEQUENCE_READY
          int32_false_true: [ 0, 1 ]
        }
      ]
    }
  ]
}
input [
  {
    name: "INPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
output [
  {
    name: "OUTPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
  }
]
"""

SIMPLE_DYNA_SEQUENCE = """
name: "simple_dyna_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest
  {
    max_candidate_sequences: 1024
    max_queue_delay_microseconds: 10000
  }
  control_input [
    {
      name: "START"
      control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "END"
      control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "READY"
      control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "CORRID"
      control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ]
    }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "3" } } ]
"""

ENSEMBLE_ADD_SUB = """
name: "ensemble_add_sub"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "IN0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "IN1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "SUM2" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "IN0" }
      input_map { key: "INPUT1" value: "IN1" }
      output_map { key: "OUTPUT0" value: "SUM" }
      output_map { key: "OUTPUT1" value: "DIFF" }
    },
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "SUM" }
      input_map { key: "INPUT1" value: "SUM" }
      output_map { key: "OUTPUT0" value: "SUM2" }
      output_map { key: "OUTPUT1" value: "ZERO" }
    }
  ]
}
"""

DYNAMIC_BATCHING = """
name: "queued"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy {
    timeout_action: REJECT default_timeout_microseconds: 5000 max_queue_size: 16
  }
  priority_queue_policy { key: 2 value: { timeout_action: DELAY allow_timeout_override: true } }
}
version_policy: { specific: { versions: [ 1, 3 ] } }
model_warmup [
  {
    name: "zeros"
    batch_size: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
  }
]
"""

ALL_EXAMPLES = {
    "simple": SIMPLE,
    "simple_sequence": SIMPLE_SEQUENCE,
    "simple_dyna_sequence": SIMPLE_DYNA_SEQUENCE,
    "ensemble_add_sub": ENSEMBLE_ADD_SUB,
    "queued": DYNAMIC_BATCHING,
}
