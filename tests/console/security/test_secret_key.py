"""The console's SECRET_KEY: published or short keys are refused; a local run keeps its own."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.security.secret_key import (
    secret_key_check,
    secret_key_from_file,
    secret_key_generate,
)


@pytest.mark.parametrize(
    "key",
    [
        "change-me-in-production",
        "portico-insecure-development-key",
        "django-insecure-" + "x" * 60,
        "a" * 80,
        "short-but-random-Qx81",
    ],
)
def test_published_short_or_repetitive_keys_are_refused(key: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
        secret_key_check(key, source="SECRET_KEY")


def test_a_generated_key_passes_the_check() -> None:
    key = secret_key_generate()
    assert len(key) >= 50
    assert secret_key_check(key, source="SECRET_KEY") == key


def test_the_key_file_is_created_private_once_and_then_kept(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret_key"
    first = secret_key_from_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_key_from_file(path) == first
    assert secret_key_check(first, source=str(path)) == first


def test_a_key_file_holding_a_published_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.write_text("change-me-in-production\n")
    with pytest.raises(ImproperlyConfigured, match="published"):
        secret_key_from_file(path)
