"""STYLE.md's checks, run with the suite: ruff, and mypy --strict on serving and its config."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.embedded


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_finds_nothing() -> None:
    result = _run(str(BIN / "ruff"), "check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_serving_and_config_pass_mypy_strict() -> None:
    result = _run(str(BIN / "mypy"), "serving", "repository/config")
    assert result.returncode == 0, result.stdout + result.stderr
