"""Acceptance suite: Triton's own client examples and QA checks against a real ``serve`` process.

Every test talks to the server only through ``tritonclient`` (or raw HTTP where Triton's QA tests
do), exactly as an existing Triton user would; nothing here imports the server's code. Each module
starts one server (module-scoped fixture) on a freshly generated example repository.
"""

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.acceptance.server import ServerProcess


# NOTE: ``server`` is each module's own module-scoped fixture (its own example repository).
@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(url=server.http, concurrency=8)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(url=server.grpc)
    yield client
    client.close()
