"""Acceptance suite: Triton's own client examples and QA checks against a real ``serve`` process.

Every test talks to the server only through ``tritonclient`` (or raw HTTP where Triton's QA tests
do), exactly as an existing Triton user would; nothing here imports the server's code. Each module
starts one server (module-scoped fixture) on a freshly generated example repository; a module whose
server runs in clear text and over TLS gets clients that speak whichever it runs.
"""

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.acceptance import clients
from tests.acceptance.server import ServerProcess
from tests.certificates import Pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway CA with a server certificate for 127.0.0.1/localhost and a client certificate."""
    return Pki(tmp_path_factory.mktemp("acceptance-pki"))


# NOTE: ``server`` is each module's own module-scoped fixture (its own example repository).
@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = clients.http_client(server, concurrency=8)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = clients.grpc_client(server)
    yield client
    client.close()
