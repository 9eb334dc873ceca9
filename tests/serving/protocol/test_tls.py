"""TLS on the serving listeners, through unmodified tritonclient (HTTP and gRPC, sync and aio).

A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate are made at
test time. gRPC uses Triton's flags (``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``, ...); HTTPS uses
``--http-ssl-cert``/``--http-ssl-key``; the metrics port stays clear text unless given its own pair.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.cli import add_arguments, settings_from_args
from serving.main import ServingProcess
from tests.certificates import Pki
from tests.serving.harness import folder_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tls_models")
    dm.write_onnx_identity(folder, "identity", dims=(-1,), max_batch_size=8)
    return folder


@pytest.fixture(scope="module")
def tls_server(pki: Pki, repo: Path) -> Iterator[ServingProcess]:
    """HTTPS and gRPC over TLS (server-authenticated); metrics in clear text."""
    settings = folder_settings(
        repo, http_ssl_cert=pki.server_cert, http_ssl_key=pki.server_key, grpc_use_ssl=True,
        grpc_server_cert=pki.server_cert, grpc_server_key=pki.server_key, grpc_root_cert=pki.ca,
    )  # fmt: skip
    with ServingProcess(settings) as process:
        yield process


@pytest.fixture(scope="module")
def mutual_server(pki: Pki, repo: Path) -> Iterator[ServingProcess]:
    """gRPC over mutual TLS; HTTP off; metrics over HTTPS with their own pair."""
    settings = folder_settings(
        repo, http_port=-1, grpc_use_ssl_mutual=True, grpc_server_cert=pki.server_cert,
        grpc_server_key=pki.server_key, grpc_root_cert=pki.ca, metrics_ssl_cert=pki.server_cert,
        metrics_ssl_key=pki.server_key,
    )  # fmt: skip
    with ServingProcess(settings) as process:
        yield process


DATA = np.arange(4, dtype=np.float32).reshape(1, 4)


def http_infer(client: httpclient.InferenceServerClient) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(DATA)
    return client.infer("identity", [tensor]).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def grpc_infer(client: grpcclient.InferenceServerClient) -> np.ndarray:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(DATA)
    return client.infer("identity", [tensor]).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def test_https_inference_with_the_server_verified_against_the_ca(
    tls_server: ServingProcess, pki: Pki
) -> None:
    client = httpclient.InferenceServerClient(
        tls_server.http_url, ssl=True,
        ssl_context_factory=lambda: ssl.create_default_context(cafile=str(pki.ca)),
    )  # fmt: skip
    try:
        assert client.is_server_live()
        np.testing.assert_array_equal(http_infer(client), DATA)
    finally:
        client.close()


def test_https_inference_with_the_ca_given_as_an_ssl_option(
    tls_server: ServingProcess, pki: Pki
) -> None:
    client = httpclient.InferenceServerClient(
        tls_server.http_url, ssl=True, ssl_options={"ca_certs": str(pki.ca)}
    )
    try:
        np.testing.assert_array_equal(http_infer(client), DATA)
    finally:
        client.close()


def test_https_inference_with_an_insecure_client(tls_server: ServingProcess) -> None:
    # ``insecure`` only skips the host name check; an unverified context skips the chain too.
    client = httpclient.InferenceServerClient(
        tls_server.http_url, ssl=True, insecure=True,
        ssl_context_factory=ssl._create_unverified_context,
    )  # fmt: skip
    try:
        np.testing.assert_array_equal(http_infer(client), DATA)
    finally:
        client.close()


def test_https_refuses_a_client_that_does_not_trust_the_certificate(
    tls_server: ServingProcess,
) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_url, ssl=True)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            client.is_server_live()
    finally:
        client.close()


def test_a_plain_http_client_gets_nothing_from_the_https_port(tls_server: ServingProcess) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_url)
    try:
        with pytest.raises(Exception) as info:  # noqa: B017 - the connection is simply dropped
            client.is_server_live()
        assert not isinstance(info.value, AssertionError)
    finally:
        client.close()


async def test_https_inference_with_the_aio_client(tls_server: ServingProcess, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca))
    client = httpaio.InferenceServerClient(tls_server.http_url, ssl=True, ssl_context=context)
    try:
        tensor = httpaio.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(DATA)
        result = await client.infer("identity", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
    finally:
        await client.close()


def test_grpc_inference_over_tls(tls_server: ServingProcess, pki: Pki) -> None:
    with grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=str(pki.ca)
    ) as client:
        assert client.is_server_live()
        np.testing.assert_array_equal(grpc_infer(client), DATA)


def test_a_plain_grpc_client_fails_against_the_tls_port(tls_server: ServingProcess) -> None:
    with (
        grpcclient.InferenceServerClient(tls_server.grpc_url) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.is_server_live(client_timeout=10)
    assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def test_metrics_stay_clear_text_without_their_own_certificate(tls_server: ServingProcess) -> None:
    url = f"http://127.0.0.1:{tls_server.ports.metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert b"nv_inference_count" in response.read()


def test_mutual_tls_serves_a_client_with_a_certificate(
    mutual_server: ServingProcess, pki: Pki
) -> None:
    with grpcclient.InferenceServerClient(
        mutual_server.grpc_url, ssl=True, root_certificates=str(pki.ca),
        private_key=str(pki.client_key), certificate_chain=str(pki.client_cert),
    ) as client:  # fmt: skip
        np.testing.assert_array_equal(grpc_infer(client), DATA)


async def test_mutual_tls_serves_the_aio_client_with_a_certificate(
    mutual_server: ServingProcess, pki: Pki
) -> None:
    client = grpcaio.InferenceServerClient(
        mutual_server.grpc_url, ssl=True, root_certificates=str(pki.ca),
        private_key=str(pki.client_key), certificate_chain=str(pki.client_cert),
    )  # fmt: skip
    try:
        tensor = grpcaio.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(DATA)
        result = await asyncio.wait_for(client.infer("identity", [tensor]), timeout=30)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
    finally:
        await client.close()


def test_mutual_tls_refuses_a_client_without_a_certificate(
    mutual_server: ServingProcess, pki: Pki
) -> None:
    with (
        grpcclient.InferenceServerClient(
            mutual_server.grpc_url, ssl=True, root_certificates=str(pki.ca)
        ) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.is_server_live(client_timeout=10)
    assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def test_metrics_over_https_with_their_own_certificate(
    mutual_server: ServingProcess, pki: Pki
) -> None:
    url = f"https://127.0.0.1:{mutual_server.ports.metrics}/metrics"
    context = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        assert b"nv_inference_count" in response.read()


def test_triton_tls_flags_parse_and_mutual_implies_tls(pki: Pki) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--grpc-use-ssl-mutual=true", f"--grpc-server-cert={pki.server_cert}",
            f"--grpc-server-key={pki.server_key}", f"--grpc-root-cert={pki.ca}",
            f"--http-ssl-cert={pki.server_cert}", f"--http-ssl-key={pki.server_key}"]  # fmt: skip
    settings = settings_from_args(vars(parser.parse_args(argv)))
    assert settings.grpc_tls and settings.grpc_use_ssl_mutual and settings.http_tls
    assert settings.grpc_root_cert == pki.ca


def test_tls_flags_without_their_files_are_refused() -> None:
    from serving.settings import ServingSettings

    with pytest.raises(ValueError) as info:
        ServingSettings(grpc_use_ssl_mutual=True, http_ssl_cert=Path("cert.pem"))
    assert str(info.value) == (
        "--grpc-use-ssl-mutual: needs --grpc-server-cert and --grpc-server-key; "
        "--grpc-use-ssl-mutual: needs --grpc-root-cert (the CA that signs clients); "
        "--http-ssl-cert and --http-ssl-key: give both or neither"
    )


def test_a_registry_replica_serving_https_advertises_an_https_url(pki: Pki, tmp_path: Path) -> None:
    from serving.settings import ServingSettings
    from serving.sources.registry import RegistrySource

    settings = ServingSettings(
        http_ssl_cert=pki.server_cert, http_ssl_key=pki.server_key, replica_address="replica-1",
        cache_dir=tmp_path,
    )  # fmt: skip
    source = RegistrySource(settings)
    source.set_endpoints(http_port=8443)
    assert source.http_url == "https://replica-1:8443"


def test_a_missing_certificate_file_stops_the_start(pki: Pki, repo: Path, tmp_path: Path) -> None:
    settings = folder_settings(
        repo, grpc_use_ssl=True, grpc_server_cert=tmp_path / "missing.pem",
        grpc_server_key=pki.server_key,
    )  # fmt: skip
    with pytest.raises(FileNotFoundError, match="missing.pem"):
        ServingProcess(settings).start()


def test_grpc_over_tls_and_mutual_tls_on_the_h2_listener(pki: Pki, repo: Path) -> None:
    # The module's servers listen with the default transport (h2corn, whose TLS is rustls);
    # ``--grpc-transport h2`` takes the same flags to Python's ``ssl``.
    files = {"grpc_server_cert": pki.server_cert, "grpc_server_key": pki.server_key,
             "grpc_root_cert": pki.ca, "grpc_transport": "h2", "http_port": -1}  # fmt: skip
    with ServingProcess(folder_settings(repo, grpc_use_ssl=True, **files)) as process:
        with grpcclient.InferenceServerClient(
            process.grpc_url, ssl=True, root_certificates=str(pki.ca)
        ) as client:
            np.testing.assert_array_equal(grpc_infer(client), DATA)
        test_a_plain_grpc_client_fails_against_the_tls_port(process)
    with ServingProcess(folder_settings(repo, grpc_use_ssl_mutual=True, **files)) as process:
        test_mutual_tls_serves_a_client_with_a_certificate(process, pki)
        test_mutual_tls_refuses_a_client_without_a_certificate(process, pki)
