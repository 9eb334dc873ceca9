"""``test_grpc.py``'s tests again, with the port served by grpc.aio (``--grpc-transport grpcio``),
which stays selectable beside the HTTP/2 listener."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.main import ServingProcess
from tests.serving.harness import folder_settings, write_protocol_repository
from tests.serving.protocol.conftest import MAX_REQUEST_BYTES
from tests.serving.protocol.test_grpc import *  # noqa: F403 - the same tests, over grpc.aio

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_protocol_repository(repo)
    settings = folder_settings(repo, max_request_bytes=MAX_REQUEST_BYTES, grpc_transport="grpcio")
    process = ServingProcess(settings).start()
    yield process
    process.stop()
