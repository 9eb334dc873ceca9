"""Which settings a process runs with: production unless development is asked for."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.environment import settings_module_select

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    # NOTE: settings_module_select writes os.environ; monkeypatch restores it afterwards.
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE")
    monkeypatch.delenv("PORTICO_ENV", raising=False)


def test_production_is_the_default(no_choice: None) -> None:
    assert settings_module_select() == "console.settings.production"


def test_development_only_when_asked_for(no_choice: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PORTICO_ENV", "development")
    assert settings_module_select() == "console.settings.local"


def test_an_explicit_settings_module_wins(no_choice: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PORTICO_ENV", "development")
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "console.settings.production")
    assert settings_module_select() == "console.settings.production"


def test_an_unknown_environment_is_refused(no_choice: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PORTICO_ENV", "staging")
    with pytest.raises(ImproperlyConfigured, match="PORTICO_ENV"):
        settings_module_select()


def _python(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Python in a fresh clone's environment: no settings module, environment, key or database."""
    unset = ("DJANGO_SETTINGS_MODULE", "PORTICO_ENV", "SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    clean.update(PORTICO_VAR_DIR=str(tmp_path))
    command = [sys.executable, "-c", args[0]] if len(args) == 1 else [sys.executable, *args]
    return subprocess.run(command, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)


def _manage(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return _python(str(ROOT / "manage.py"), *args, tmp_path=tmp_path)


def test_the_console_without_variables_runs_production_and_will_not_start_without_a_key(
    tmp_path: Path,
) -> None:
    result = _manage("runconsole", "--port", "9", tmp_path=tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr and "Traceback" not in result.stderr


def test_any_asgi_server_loading_the_console_without_a_key_is_refused(tmp_path: Path) -> None:
    result = _python("import console.asgi", tmp_path=tmp_path)
    assert result.returncode != 0 and "SECRET_KEY is not set" in result.stderr


def test_commands_that_sign_nothing_run_under_production_without_a_key(tmp_path: Path) -> None:
    result = _manage("migrate", "--noinput", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr


def test_runplatform_on_a_fresh_clone_generates_and_keeps_a_private_key(tmp_path: Path) -> None:
    assert _manage("runplatform", "--help", tmp_path=tmp_path).returncode == 0
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text()
    assert _manage("runplatform", "--help", tmp_path=tmp_path).returncode == 0
    assert key_file.read_text() == key
