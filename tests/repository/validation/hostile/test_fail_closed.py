"""Where the sandbox cannot be set up, validation fails closed: every version, code or not, ends
failed with the reason and the fix, and no model code runs."""

from __future__ import annotations

import pytest

from repository import demo_models
from tests.repository.validation.hostile.conftest import CONFIG, Outside, Validator

pytestmark = [pytest.mark.timeout(300)]

MISSING_BWRAP = {"PORTICO_VALIDATION_BWRAP_PATH": "/nonexistent/bwrap"}
RAN = "raise SystemExit('model code ran')"


@pytest.mark.parametrize("extra_settings", [MISSING_BWRAP])
def test_without_bubblewrap_a_python_model_fails_closed_without_running(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    entries = {"config.pbtxt": CONFIG.format(name="py").encode(), "1/model.py": RAN.encode()}
    body = validator.validated("py", entries)
    assert body["state"] == "failed"
    assert body["validation"]["steps"][-1]["name"] == "sandbox"
    error = body["validation"]["error"]
    assert "/nonexistent/bwrap" in error and "install bubblewrap" in error.lower()
    assert "model code ran" not in str(body)
    outside.assert_unchanged("py")


@pytest.mark.parametrize("extra_settings", [MISSING_BWRAP])
def test_without_bubblewrap_an_onnx_model_fails_closed_too(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside, tmp_path
) -> None:
    model_dir = demo_models.write_onnx_mlp(tmp_path / "m", name="onnx", sizes=(4, 2))
    entries = {
        p.relative_to(model_dir).as_posix(): p.read_bytes()
        for p in model_dir.rglob("*")
        if p.is_file()
    }
    body = validator.validated("onnx", entries)
    assert body["state"] == "failed"
    assert "validation sandbox is unavailable" in body["validation"]["error"]
    outside.assert_unchanged("onnx")
