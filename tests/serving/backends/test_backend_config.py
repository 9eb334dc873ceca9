"""``--backend-config``: server-wide backend parameters that a model's own parameters override."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from serving.backends.backend_config import BACKEND_SETTINGS, parse_backend_config
from serving.backends.onnxruntime import OnnxRuntimeInstance
from serving.backends.registry import BACKENDS, create_instances, load_instances
from serving.cli import add_arguments, settings_from_args
from serving.settings import settings_from_env
from tests.serving.harness import serving, serving_subprocess

from .specs import spec_for

pytestmark = pytest.mark.embedded

SPINNING = "session.intra_op.allow_spinning"


def test_entries_parse_into_a_table_per_backend() -> None:
    table = parse_backend_config(
        [
            "onnxruntime,allow_spinning=false",
            "ONNXRuntime, Intra_Op_Thread_Count = 2",
            "python,execute_timeout_s=2.5",
        ]  # fmt: skip
    )
    assert table == {
        "onnxruntime": {"allow_spinning": "false", "intra_op_thread_count": "2"},
        "python": {"execute_timeout_s": "2.5"},
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("allow_spinning=false", "expected <backend>,<setting>=<value>"),
        ("onnxruntime,allow_spinning", "expected <backend>,<setting>=<value>"),
        ("onnx,allow_spinning=false", "unknown backend 'onnx'"),
        ("onnxruntime,allow_spining=false", "has no setting 'allow_spining'"),
        ("tensorrt,allow_spinning=false", r"has no setting 'allow_spinning' \(settings: none\)"),
        ("onnxruntime,allow_spinning=maybe", "must be true or false, got 'maybe'"),
        ("onnxruntime,intra_op_thread_count=two", "must be an integer, got 'two'"),
        ("onnxruntime,intra_op_thread_count=-1", "must not be negative"),
        ("python,execute_timeout_s=soon", "must be a number of seconds"),
        ("onnxruntime,thread_pool_nice=20", "must be from 0 to 19, got '20'"),
        ("onnxruntime,thread_pool_nice=-2", "must be from 0 to 19, got '-2'"),
    ],
)
def test_a_bad_entry_is_refused_by_name(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--backend-config '{entry}': .*{message}"):
        parse_backend_config([entry])


def test_every_backend_has_a_settings_table() -> None:
    assert set(BACKEND_SETTINGS) == set(BACKENDS)


def test_the_flag_and_its_variable_reach_the_settings() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = ["--backend-config", "onnxruntime,allow_spinning=false",
             "--backend-config", "pytorch,intra_op_thread_count=1"]  # fmt: skip
    options = vars(parser.parse_args(flags))
    settings = settings_from_args(options)
    assert settings.backend_defaults == {
        "onnxruntime": {"allow_spinning": "false"},
        "pytorch": {"intra_op_thread_count": "1"},
    }
    from_env = settings_from_env(
        {"SERVING_BACKEND_CONFIG": "onnxruntime,allow_spinning=0;python,bls_timeout_s=3"}
    )
    assert from_env.backend_defaults == {
        "onnxruntime": {"allow_spinning": "0"},
        "python": {"bls_timeout_s": "3"},
    }
    with pytest.raises(ValueError, match="has no setting 'spin'"):
        settings_from_env({"SERVING_BACKEND_CONFIG": "onnxruntime,spin=0"})


def _session_entry(instance: object, key: str) -> str:
    assert isinstance(instance, OnnxRuntimeInstance)
    return instance._require_session().get_session_options().get_session_config_entry(key)


def test_a_default_reaches_the_session_and_the_models_own_parameter_wins(tmp_path: Path) -> None:
    defaults = parse_backend_config(
        ["onnxruntime,allow_spinning=false", "onnxruntime,intra_op_thread_count=1"]
    )
    plain = spec_for(dm.write_onnx_identity(tmp_path, "plain"))
    own = spec_for(
        dm.write_onnx_identity(tmp_path, "own"),
        edit='parameters { key: "Allow_Spinning" value { string_value: "true" } }',
    )
    loaded = []
    try:
        for spec, expected in ((plain, "0"), (own, "1")):
            (instance,) = create_instances(
                spec, cpu_count=4, gpu_count=0, backend_defaults=defaults
            )
            load_instances([instance])
            loaded.append(instance)
            assert _session_entry(instance, SPINNING) == expected
            # cores / instances would give 4; the server-wide count is taken instead
            assert instance.placement.intra_op_threads == 1
        # the served config is still the model's own: the default was added to a copy
        assert "allow_spinning" not in plain.config.parameters
        assert list(own.config.parameters) == ["Allow_Spinning"]
    finally:
        for instance in loaded:
            instance.unload()


def test_a_served_model_runs_with_the_default_and_its_config_does_not_show_it(
    tmp_path: Path,
) -> None:
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    with serving(tmp_path, backend_config=("onnxruntime,allow_spinning=false",)) as process:
        assert process.server is not None
        instances = process.server.models["identity"].versions[1].instances
        assert instances
        assert [_session_entry(instance, SPINNING) for instance in instances] == ["0"] * len(
            instances
        )
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            config = client.get_model_config("identity")
        finally:
            client.close()
        assert "allow_spinning" not in config.get("parameters", {})


def test_the_server_refuses_to_start_on_a_misspelt_setting(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--http-port", "0",
            "--grpc-port", "-1", "--metrics-port", "-1",
            "--backend-config", "onnxruntime,allow_spining=false"]  # fmt: skip
    with serving_subprocess(args) as process:
        assert process.wait(timeout=60) != 0
        assert process.stdout is not None
        log = process.stdout.read()
    assert "has no setting 'allow_spining'" in log, log
