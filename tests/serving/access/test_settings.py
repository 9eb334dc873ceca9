"""``PORTICO_INFERENCE_AUTH``: required by default in registry mode, off on request (then bound to
loopback unless a host is given); folder mode has no token table."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.settings import ServingSettings, settings_from_env


def test_registry_mode_requires_tokens_and_binds_every_address_by_default() -> None:
    settings = settings_from_env({})
    assert settings.auth_required and settings.host == "0.0.0.0"


def test_auth_off_in_registry_mode_binds_loopback_unless_a_host_is_given() -> None:
    assert settings_from_env({"PORTICO_INFERENCE_AUTH": "off"}).host == "127.0.0.1"
    explicit = settings_from_env({"PORTICO_INFERENCE_AUTH": "OFF", "SERVING_HOST": "0.0.0.0"})
    assert not explicit.auth_required and explicit.host == "0.0.0.0"


def test_folder_mode_has_no_token_table(tmp_path: Path) -> None:
    folder = ServingSettings(model_repository=tmp_path)
    assert not folder.auth_required and folder.host == "0.0.0.0"
    with pytest.raises(ValueError, match="folder repository has no token table"):
        settings_from_env({"PORTICO_INFERENCE_AUTH": "required"}, model_repository=tmp_path)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="expected required or off"):
        settings_from_env({"PORTICO_INFERENCE_AUTH": "maybe"})
