"""The cost benchmark's model repository: a ``--parameter`` variant reaches the loaded session."""

from pathlib import Path

import pytest

from bench import cost
from serving.backends.base import InstancePlacement
from serving.backends.onnxruntime import OnnxRuntimeInstance
from tests.serving.backends.specs import spec_for

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("parameter", ["", "allow_spinning=false"])
def test_each_model_loads_with_the_variants_parameter(tmp_path: Path, parameter: str) -> None:
    cost.write_models(tmp_path, parameter=parameter)
    for name in cost.MODELS:
        spec = spec_for(tmp_path / name)
        assert {key: value.string_value for key, value in spec.config.parameters.items()} == (
            {"allow_spinning": "false"} if parameter else {}
        )
        placement = InstancePlacement(name=f"{name}_0", kind="KIND_CPU", intra_op_threads=2)
        instance = OnnxRuntimeInstance(spec, placement)
        instance.load()
        try:
            options = instance._require_session().get_session_options()
            if parameter:
                assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        finally:
            instance.unload()


@pytest.mark.parametrize(
    ("label", "protocol"),
    [
        ("this tree", None),
        ("allow_spinning=false", None),
        ("--grpc-workers 1", "grpc"),
        ("--http-workers 2", "http"),
        ("allow_spinning=false --grpc-workers 1", "grpc"),
    ],
)
def test_a_label_with_a_front_end_flag_is_measured_over_that_protocol_only(
    label: str, protocol: str | None
) -> None:
    assert cost._only_protocol(label) == protocol
