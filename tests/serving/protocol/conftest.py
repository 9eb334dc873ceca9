"""One folder-mode server per test module, shared by its protocol tests; the gate the gated
model of ``test_admission`` waits on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.main import ServingProcess
from tests.serving.harness import folder_settings, write_protocol_repository

MAX_REQUEST_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_protocol_repository(repo)
    process = ServingProcess(folder_settings(repo, max_request_bytes=MAX_REQUEST_BYTES)).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the gated model looks: it holds requests until this file exists."""
    return tmp_path_factory.mktemp("gate") / "open"
