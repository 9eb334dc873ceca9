"""Validation of the scheduling choice: dynamic batching, sequence batching, ensembles."""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2 as mc

Control = mc.ModelSequenceBatching.Control
DELAY = mc.ModelQueuePolicy.TimeoutAction.DELAY

CORRID_TYPES = frozenset(
    {mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING}
)


def scheduling_problems(cfg: mc.ModelConfig) -> list[str]:
    """Problems with ``dynamic_batching``, ``sequence_batching`` and ``ensemble_scheduling``."""
    problems = []
    if cfg.HasField("dynamic_batching"):
        problems += _dynamic(cfg)
    if cfg.HasField("sequence_batching"):
        problems += _sequence(cfg)
    if cfg.platform == "ensemble" or cfg.HasField("ensemble_scheduling"):
        problems += ensemble_problems(cfg)
    return problems


def _dynamic(cfg: mc.ModelConfig) -> list[str]:
    dyn = cfg.dynamic_batching
    problems = [
        f"dynamic_batching.preferred_batch_size: preferred batch size {size} must be in "
        f"[1, max_batch_size={cfg.max_batch_size}]"
        for size in dyn.preferred_batch_size
        if not 1 <= size <= max(cfg.max_batch_size, 0)
    ]
    levels = dyn.priority_levels
    if levels > 0 and not 1 <= dyn.default_priority_level <= levels:
        problems.append(
            f"dynamic_batching.default_priority_level: must be in [1, {levels}] "
            f"(priority_levels), got {dyn.default_priority_level}"
        )
    problems += [
        f"dynamic_batching.priority_queue_policy: priority level {level} must be in [1, {levels}]"
        for level in dyn.priority_queue_policy
        if not 1 <= level <= levels
    ]
    if dyn.preserve_ordering:
        problems += _preserve_ordering(dyn)
    return problems


def _preserve_ordering(dyn: mc.ModelDynamicBatching) -> list[str]:
    problems = []
    if dyn.priority_levels > 1:
        problems.append(
            "dynamic_batching.preserve_ordering: cannot be combined with more than one "
            "priority level"
        )
    policies = [dyn.default_queue_policy, *dyn.priority_queue_policy.values()]
    # A DELAY action only matters with a timeout; Triton rejects just that combination.
    if any(p.timeout_action == DELAY and p.default_timeout_microseconds for p in policies):
        problems.append(
            "dynamic_batching.preserve_ordering: cannot be combined with timeout_action DELAY"
        )
    return problems


def _sequence(cfg: mc.ModelConfig) -> list[str]:
    seq = cfg.sequence_batching
    problems: list[str] = []
    if seq.HasField("oldest"):
        oldest = seq.oldest
        problems += [
            f"sequence_batching.oldest.preferred_batch_size: preferred batch size {size} must be "
            f"in [1, max_batch_size={cfg.max_batch_size}]"
            for size in oldest.preferred_batch_size
            if not 1 <= size <= max(cfg.max_batch_size, 0)
        ]
    seen: dict[int, str] = {}
    for index, control_input in enumerate(seq.control_input):
        where = f"sequence_batching.control_input[{index}]"
        if not control_input.name:
            problems.append(f"{where}.name: must not be empty")
        if len(control_input.control) != 1:
            problems.append(f"{where}.control: must have exactly one control")
        for control in control_input.control:
            problems += _control(where, control, seen, control_input.name)
    return problems


def _control(
    where: str, control: mc.ModelSequenceBatching.Control, seen: dict[int, str], tensor: str
) -> list[str]:
    kind = Control.Kind.Name(control.kind)
    problems = []
    if control.kind in seen:
        problems.append(f"{where}.control: {kind} is already given by '{seen[control.kind]}'")
    seen[control.kind] = tensor
    values = [
        len(control.int32_false_true),
        len(control.fp32_false_true),
        len(control.bool_false_true),
    ]
    if control.kind == Control.Kind.CONTROL_SEQUENCE_CORRID:
        if any(values):
            problems.append(f"{where}.control: {kind} must not specify false/true values")
        if control.data_type not in CORRID_TYPES:
            problems.append(
                f"{where}.control.data_type: {kind} must be TYPE_UINT64, TYPE_INT64, "
                "TYPE_UINT32, TYPE_INT32 or TYPE_STRING"
            )
    elif sorted(values) != [0, 0, 2]:
        problems.append(
            f"{where}.control: {kind} must specify exactly one of int32_false_true, "
            "fp32_false_true or bool_false_true with two values"
        )
    return problems


def ensemble_problems(cfg: mc.ModelConfig) -> list[str]:
    """Ensemble rules that need only the ensemble's own config (data flow between steps)."""
    problems: list[str] = []
    if cfg.platform != "ensemble":
        return ["ensemble_scheduling: requires platform 'ensemble'"]
    steps = cfg.ensemble_scheduling.step
    if len(steps) == 0:
        return [*problems, "ensemble_scheduling.step: an ensemble must have at least one step"]
    for field in ("instance_group", "model_warmup"):
        if len(getattr(cfg, field)) > 0:
            problems.append(f"{field}: not allowed for an ensemble")
    inputs = {entry.name for entry in cfg.input}
    produced: dict[str, int] = {}
    for index, step in enumerate(steps):
        problems += _step(index, step, inputs, produced)
    known = inputs | set(produced)
    for index, step in enumerate(steps):
        problems += [
            f"ensemble_scheduling.step[{index}].input_map: '{model_input}' reads tensor "
            f"'{tensor}', which is neither an ensemble input nor an output of any step"
            for model_input, tensor in sorted(step.input_map.items())
            if tensor not in known
        ]
    used = {tensor for step in steps for tensor in step.input_map.values()}
    problems += [
        f"input: ensemble input '{name}' is not used by any step" for name in sorted(inputs - used)
    ]
    problems += [
        f"output: ensemble output '{entry.name}' is not produced by any step"
        for entry in cfg.output
        if entry.name not in produced
    ]
    return problems + _cycles(steps, inputs, known)


def _step(
    index: int, step: mc.ModelEnsembling.Step, inputs: set[str], produced: dict[str, int]
) -> list[str]:
    where = f"ensemble_scheduling.step[{index}]"
    problems = []
    if not step.model_name:
        problems.append(f"{where}.model_name: must not be empty")
    if step.model_version < -1:
        problems.append(f"{where}.model_version: must be -1 (latest) or a version number")
    if step.model_namespace:
        problems.append(f"{where}.model_namespace: model namespacing is not supported by Portico")
    if len(step.input_map) == 0 or len(step.output_map) == 0:
        problems.append(f"{where}: input_map and output_map must not be empty")
    for tensor in sorted(step.output_map.values()):
        if tensor in produced or tensor in inputs:
            problems.append(f"{where}.output_map: tensor '{tensor}' is written more than once")
        produced.setdefault(tensor, index)
    return problems


def _cycles(
    steps: Sequence[mc.ModelEnsembling.Step], inputs: set[str], known: set[str]
) -> list[str]:
    ready, pending = set(inputs), list(range(len(steps)))
    progress = True
    while pending and progress:
        runnable = [i for i in pending if set(steps[i].input_map.values()) <= ready]
        progress = bool(runnable)
        for i in runnable:
            ready |= set(steps[i].output_map.values())
            pending.remove(i)
    # steps reading unknown tensors were reported already; the rest wait on each other
    stuck = [i for i in pending if set(steps[i].input_map.values()) <= known]
    return [
        f"ensemble_scheduling.step[{i}]: circular dependency between steps "
        f"(model '{steps[i].model_name}')"
        for i in stuck
    ]
