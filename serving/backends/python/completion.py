"""Run a Python model's ``auto_complete_config`` once, in a throw-away interpreter contained like
the model's own processes (``launch.py``): no secrets in its environment, nothing left running."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from serving.backends.python import launch
from serving.backends.python.config_json import config_from_dict, config_to_dict
from serving.errors import InvalidArgumentError


def run_autocomplete(
    cfg: model_config_pb2.ModelConfig, version_dir: Path, *, timeout_s: float
) -> model_config_pb2.ModelConfig:
    """The config as the model completed it; INVALID_ARG with the model's error otherwise."""
    name = cfg.name or version_dir.parent.name
    model_file = Path(version_dir) / (cfg.default_model_filename or "model.py")
    if not model_file.is_file():
        raise InvalidArgumentError(f"python model '{name}': '{model_file.name}' not found")
    with tempfile.TemporaryDirectory(prefix="portico-autocomplete-") as tmp:
        config_in, config_out = Path(tmp) / "in.json", Path(tmp) / "out.json"
        config_in.write_text(json.dumps(config_to_dict(cfg)))
        command = launch.stub_command(
            "--autocomplete", str(model_file), str(config_in), str(config_out)
        )
        process = launch.launch(command, stdout=subprocess.DEVNULL)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise InvalidArgumentError(
                f"auto-complete of python model '{name}' timed out after {timeout_s:g} s"
            ) from None
        finally:
            launch.kill(process)  # and whatever it forked
            process.wait()
        if not config_out.is_file():
            raise InvalidArgumentError(f"auto-complete of python model '{name}' crashed")
        result = json.loads(config_out.read_text())
    if "error" in result:
        raise InvalidArgumentError(
            f"auto-complete of python model '{name}' failed: {result['error']}"
        )
    try:
        return config_from_dict(result["config"])
    except json_format.ParseError as error:
        raise InvalidArgumentError(
            f"auto-complete of python model '{name}' produced an invalid config: {error}"
        ) from None


def completed_fields(
    before: model_config_pb2.ModelConfig, after: model_config_pb2.ModelConfig
) -> list[str]:
    """The fields auto-complete filled in, for reports (``input[INPUT0]``, ``max_batch_size``)."""
    fields = []
    if before.max_batch_size != after.max_batch_size:
        fields.append("max_batch_size")
    for kind in ("input", "output"):
        had = {t.name for t in getattr(before, kind)}
        fields += [f"{kind}[{t.name}]" for t in getattr(after, kind) if t.name not in had]
    for oneof_field in ("dynamic_batching", "model_transaction_policy"):
        if after.HasField(oneof_field) and not before.HasField(oneof_field):
            fields.append(oneof_field)
    return fields
