"""docker-compose.yml describes the scaled-out stack: it must stay valid and complete."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_every_process_of_the_stack(compose: dict) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "console", "worker", "serving-1", "serving-2", "proxy"):
        assert name in services, name


def test_portico_services_share_one_image_and_the_artifact_volume(compose: dict) -> None:
    services = compose["services"]
    for name in ("console", "worker", "serving-1", "serving-2"):
        service = services[name]
        assert service["build"] == "."
        assert service["image"] == "portico:latest"
        # Serving reads artifacts only (docs/security.md); the console and worker write them.
        mounts = {"artifacts:/var/lib/portico", "artifacts:/var/lib/portico:ro"}
        assert mounts & set(service["volumes"]), name
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
    assert "artifacts" in compose["volumes"]


def test_ports_of_console_and_proxy(compose: dict) -> None:
    services = compose["services"]
    assert "8080:8080" in services["console"]["ports"]
    assert {"8000:8000", "8001:8001"} <= set(services["proxy"]["ports"])
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "serving-1:8000" in nginx and "serving-2:8000" in nginx
    assert "grpc_pass" in nginx


def test_replicas_serve_the_registry(compose: dict) -> None:
    for name in ("serving-1", "serving-2"):
        command = compose["services"][name]["command"]
        assert command[:3] == ["python", "manage.py", "serve"]
        assert "--model-repository" not in command


def test_gpu_override_builds_the_gpu_target_and_reserves_a_gpu_per_replica() -> None:
    override = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())
    assert set(override["services"]) == {"serving-1", "serving-2"}
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
    for name in ("console", "serving-1", "serving-2"):
        assert "security_opt" not in services[name], name
