"""docker-compose.yml describes the scaled-out stack: it must stay valid, complete and scalable
(`docker compose up --scale serving=N`: nothing names a replica)."""

import re
from pathlib import Path

import pytest
import yaml

from serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.embedded

LONG_RUNNING = ("postgres", "redis", "console", "worker", "serving", "proxy", "prometheus",
                "grafana")  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def nginx() -> str:
    return (ROOT / "deploy" / "nginx.conf").read_text()


def test_compose_has_every_process_of_the_stack_and_one_scalable_serving_service(
    compose: dict,
) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "console", "worker", "serving", "proxy"):
        assert name in services, name
    assert not [name for name in services if re.fullmatch(r"serving-\d+", name)]
    serving = services["serving"]
    # A fixed container name, host port or replica address would stop --scale from working.
    assert "container_name" not in serving and "ports" not in serving
    assert "SERVING_REPLICA_ADDRESS" not in serving["environment"]


def test_portico_services_share_one_image_and_the_artifact_volume(compose: dict) -> None:
    services = compose["services"]
    for name in ("console", "worker", "serving"):
        service = services[name]
        assert service["build"] == "."
        assert service["image"] == "portico:latest"
        assert any(v.startswith("artifacts:/var/lib/portico") for v in service["volumes"])
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
    assert "artifacts:/var/lib/portico:ro" in services["serving"]["volumes"]
    assert "artifacts" in compose["volumes"]


def test_every_long_running_service_restarts_and_reports_its_health(compose: dict) -> None:
    services = compose["services"]
    for name in LONG_RUNNING:
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["healthcheck"]["test"], name
    # The one-shot role job is retried until the console has migrated, then done.
    assert services["serving-role"]["restart"] == "on-failure"


def test_serving_is_healthy_when_ready_and_stops_after_its_drain(compose: dict) -> None:
    serving = compose["services"]["serving"]
    assert "/v2/health/ready" in " ".join(serving["healthcheck"]["test"])
    grace_s = int(serving["stop_grace_period"].rstrip("s"))
    defaults = ServingSettings()  # the drain grace, then the wait for in-flight requests
    assert grace_s > defaults.drain_grace_s + defaults.exit_timeout_s
    # The last-known registry snapshot lives in the replica's own cache folder.
    assert serving["environment"]["SERVING_CACHE_DIR"]


def test_the_proxy_is_the_only_door_and_terminates_tls_on_every_port(
    compose: dict, nginx: str
) -> None:
    services = compose["services"]
    # The console trusts X-Forwarded-Proto, so nothing but the proxy may reach it.
    assert "ports" not in services["console"]
    assert set(services["proxy"]["ports"]) == {"80:80", "443:443", "8000:8000", "8001:8001"}
    for port in (443, 8000, 8001):
        assert re.search(rf"^\s*listen {port} ssl;", nginx, re.MULTILINE), port
    assert "grpc_pass" in nginx
    assert "proxy_set_header X-Forwarded-Proto https;" in nginx
    assert "ssl_certificate /etc/nginx/tls/tls.crt;" in nginx
    assert "tls:/etc/nginx/tls:ro" in services["proxy"]["volumes"]
    cert = services["tls-cert"]
    assert cert["command"][:2] == ["python", "deploy/tls/first_start_cert.py"]
    assert "tls" in compose["volumes"]


def test_the_first_start_certificate_is_made_once_and_kept(tmp_path: Path) -> None:
    import importlib.util

    from cryptography import x509

    spec = importlib.util.spec_from_file_location(
        "first_start_cert", ROOT / "deploy" / "tls" / "first_start_cert.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ensure_certificate(tmp_path, ["portico.example", "127.0.0.1"]) is True
    first = (tmp_path / "tls.crt").read_bytes()
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    names = x509.load_pem_x509_certificate(first).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert names.value.get_values_for_type(x509.DNSName) == ["portico.example"]
    assert module.ensure_certificate(tmp_path, ["other"]) is False  # yours, or the first, is kept
    assert (tmp_path / "tls.crt").read_bytes() == first


def test_the_proxy_resolves_the_service_at_run_time_and_skips_failing_replicas(nginx: str) -> None:
    assert "serving-1" not in nginx and "serving-2" not in nginx
    assert re.search(r"^\s*resolver 127\.0\.0\.11 ", nginx, re.MULTILINE)
    for port in (8000, 8001):
        assert re.search(rf"server serving:{port} resolve max_fails=\d+ fail_timeout=\d+s;", nginx)
    assert nginx.count("zone serving_") == 2  # "resolve" needs the group in shared memory
    assert "proxy_next_upstream error timeout;" in nginx
    assert "grpc_next_upstream error timeout;" in nginx
    image = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["proxy"]["image"]
    major, minor, patch = (int(x) for x in image.split(":")[1].split("."))
    assert (major, minor, patch) >= (1, 27, 3)  # "resolve" is open source from 1.27.3


def test_try_it_reaches_serving_through_the_proxy(compose: dict) -> None:
    env = compose["services"]["console"]["environment"]
    assert env["PORTICO_SERVING_HTTP_URL"] == "https://proxy:8000"
    assert env["SSL_CERT_FILE"] == "/run/portico-tls/tls.crt"  # trusts the proxy's certificate


def test_replicas_serve_the_registry(compose: dict) -> None:
    command = compose["services"]["serving"]["command"]
    assert command[:3] == ["python", "manage.py", "serve"]
    assert "--model-repository" not in command


def test_gpu_override_builds_the_gpu_target_and_reserves_a_gpu_per_replica() -> None:
    override = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())
    assert set(override["services"]) == {"serving"}  # every replica of the one service
    for service in override["services"].values():
        assert service["build"] == {"context": ".", "target": "gpu"}
        assert service["image"] == "portico:gpu"
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}


def test_dockerfile_defaults_to_the_cpu_image_and_swaps_onnxruntime_in_the_gpu_target() -> None:
    stages = [
        line.split()
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("FROM ")
    ]
    assert stages[0][-2:] == ["AS", "cpu"]
    assert ["FROM", "cpu", "AS", "gpu"] in stages
    assert stages[-1] == ["FROM", "cpu"]  # the last stage is what a plain build produces
    gpu = (ROOT / "Dockerfile").read_text().split("AS gpu", 1)[1]
    assert "python deploy/gpu/lock.py && pip uninstall --yes onnxruntime" in gpu
    assert "pip install --no-cache-dir -r requirements-gpu.lock" in gpu


def test_only_the_worker_may_create_the_validation_sandbox_namespaces(compose: dict) -> None:
    services = compose["services"]
    options = services["worker"]["security_opt"]
    profile = next(o.removeprefix("seccomp=") for o in options if o.startswith("seccomp="))
    assert (ROOT / profile).is_file()
    assert "apparmor=unconfined" in options
    for name in ("console", "serving"):
        assert "security_opt" not in services[name], name
