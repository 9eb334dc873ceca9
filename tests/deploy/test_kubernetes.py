"""deploy/kubernetes renders with `kubectl kustomize` into a stack that probes, drains, scales and
isolates serving as docs/deploy.md says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from repository.sandbox import CheckLimits
from repository.tuning.pod_job import LoadTestPodSettings, load_test_job_manifest
from repository.validation.check_job.manifest import PLACEMENT_FIELDS, check_job_manifest
from serving.settings import ServingSettings

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KUBECTL = shutil.which("kubectl")
SERVING_LABELS = {"app.kubernetes.io/name": "portico", "app.kubernetes.io/component": "serving"}

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (for kustomize) is not installed"
)


def _render(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.fixture(scope="module", params=["cpu", "gpu"])
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    if KUBECTL is None:
        pytest.skip("kubectl (for kustomize) is not installed")
    return request.param, _render(KUBERNETES / "overlays" / request.param)


@pytest.fixture
def with_keda(tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    # kustomize takes only relative paths to other kustomizations.
    rel = os.path.relpath(KUBERNETES, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{rel}/overlays/cpu]\ncomponents: [{rel}/components/keda]\n"
    )
    yield _render(tmp_path)


def test_serving_is_probed_for_readiness_liveness_and_startup(overlay: tuple) -> None:
    _, docs = overlay
    serving = _container(_one(docs, "Deployment", "portico-serving"))
    assert serving["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert serving["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = serving["startupProbe"]
    # Liveness must not kill a replica that is still loading models: minutes of start-up allowed.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_termination_grace_covers_prestop_and_the_drain(overlay: tuple) -> None:
    _, docs = overlay
    deployment = _one(docs, "Deployment", "portico-serving")
    spec = deployment["spec"]["template"]["spec"]
    prestop_s = _container(deployment)["lifecycle"]["preStop"]["sleep"]["seconds"]
    # After SIGTERM serving stays listening for its drain grace, then waits for in-flight requests.
    defaults = ServingSettings()
    drain_s = defaults.drain_grace_s + defaults.exit_timeout_s
    assert spec["terminationGracePeriodSeconds"] > prestop_s + drain_s
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_every_container_has_requests_limits_and_a_locked_down_context(overlay: tuple) -> None:
    _, docs = overlay
    for deployment in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        pod = deployment["spec"]["template"]["spec"]
        container = _container(deployment)
        name = deployment["metadata"]["name"]
        assert container["resources"]["requests"]["cpu"], name
        assert container["resources"]["limits"]["memory"], name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        # Only the worker holds a token: it creates the validation check Jobs.
        assert pod["automountServiceAccountToken"] is (name == "portico-worker"), name
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name


def test_serving_refuses_request_bytes_past_an_eighth_of_its_memory_limit(overlay: tuple) -> None:
    _, docs = overlay
    serving = _container(_one(docs, "Deployment", "portico-serving"))
    env = {e["name"]: e.get("value") for e in serving["env"]}
    budget = int(env["SERVING_MAX_IN_FLIGHT_REQUEST_BYTES"])
    limit = _bytes(serving["resources"]["limits"]["memory"])
    # The largest request fits (serving refuses to start otherwise), and what requests may hold
    # while they run (two or three times their bytes) leaves the rest of the limit to the models.
    assert ServingSettings().max_request_bytes <= budget <= limit // 8


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", quantity).groups()  # type: ignore[union-attr]
    return int(number) * 1024 ** ("_KMGT".index(unit[0]) if unit else 0)


def test_gpu_overlay_requests_a_gpu_and_cpu_overlay_does_not(overlay: tuple) -> None:
    kind, docs = overlay
    serving = _one(docs, "Deployment", "portico-serving")
    resources = _container(serving)["resources"]
    if kind == "gpu":
        assert resources["limits"]["nvidia.com/gpu"] == 1
        assert serving["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert _container(serving)["image"] == "portico:gpu"
    else:
        assert "nvidia.com/gpu" not in resources["limits"]
        assert _container(serving)["image"] == "portico:latest"


def test_serving_spreads_across_nodes_and_keeps_a_disruption_budget(overlay: tuple) -> None:
    _, docs = overlay
    pod = _one(docs, "Deployment", "portico-serving")["spec"]["template"]["spec"]
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = _one(docs, "PodDisruptionBudget", "portico-serving")
    assert pdb["spec"]["selector"]["matchLabels"] == SERVING_LABELS
    assert pdb["spec"]["maxUnavailable"] == 1


def test_autoscaler_uses_the_queue_time_metric_the_adapter_publishes(overlay: tuple) -> None:
    _, docs = overlay
    hpa = _one(docs, "HorizontalPodAutoscaler", "portico-serving")
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    values = yaml.safe_load(
        (KUBERNETES / "autoscaling" / "prometheus-adapter-values.yaml").read_text()
    )
    rule = values["rules"]["external"][0]
    assert rule["name"]["as"] == metric
    query = rule["metricsQuery"]
    assert "nv_inference_queue_duration_us" in query and "nv_inference_request_success" in query
    assert hpa["spec"]["scaleTargetRef"]["name"] == "portico-serving"


def test_keda_component_replaces_the_hpa_with_the_same_query(with_keda: list) -> None:
    assert not [d for d in with_keda if d["kind"] == "HorizontalPodAutoscaler"]
    scaled = _one(with_keda, "ScaledObject", "portico-serving")
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert "nv_inference_queue_duration_us" in trigger["metadata"]["query"]
    hpa_target = _one(
        _render(KUBERNETES / "overlays" / "cpu"), "HorizontalPodAutoscaler", "portico-serving"
    )["spec"]["metrics"][0]["external"]["target"]["value"]
    assert trigger["metadata"]["threshold"] == hpa_target


def test_secrets_are_referenced_never_inlined(overlay: tuple) -> None:
    _, docs = overlay
    assert not [d for d in docs if d["kind"] == "Secret"]
    rendered = json.dumps(docs)
    assert not re.search(r'"name": "(SECRET_KEY|DATABASE_URL|REDIS_URL)"', rendered)
    serving = _container(_one(docs, "Deployment", "portico-serving"))
    secrets = {e["secretRef"]["name"] for e in serving["envFrom"] if "secretRef" in e}
    assert secrets == {"portico-serving", "portico-s3"}  # never the console's SECRET_KEY
    console = _container(_one(docs, "Deployment", "portico-console"))
    assert {"secretRef": {"name": "portico-console"}} in console["envFrom"]


def test_every_process_that_touches_artifacts_reads_them_from_object_storage(
    overlay: tuple,
) -> None:
    _, docs = overlay
    storage = _one(docs, "ConfigMap", "portico-storage")["data"]
    assert storage["PORTICO_BLOB_STORAGE"] == "s3" and storage["PORTICO_BLOB_S3_BUCKET"]
    for name in ("portico-serving", "portico-console", "portico-worker"):
        env_from = _container(_one(docs, "Deployment", name))["envFrom"]
        assert {"configMapRef": {"name": "portico-storage"}} in env_from, name
        assert {"secretRef": {"name": "portico-s3", "optional": True}} in env_from, name


def test_serving_runs_without_the_console_key_and_caches_below_the_volume_root(
    overlay: tuple,
) -> None:
    _, docs = overlay
    serving = _container(_one(docs, "Deployment", "portico-serving"))
    env = {e["name"]: e.get("value") for e in serving["env"]}
    assert env["DJANGO_SETTINGS_MODULE"] == "console.settings.serving"
    mounts = {m["mountPath"] for m in serving["volumeMounts"]}
    assert env["SERVING_CACHE_DIR"] not in mounts
    assert any(env["SERVING_CACHE_DIR"].startswith(m + "/") for m in mounts)


def test_network_is_denied_by_default_and_every_pod_has_a_policy(overlay: tuple) -> None:
    _, docs = overlay
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deny = _one(docs, "NetworkPolicy", "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    selected = {
        p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component")
        for p in policies
    }
    for workload in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        component = workload["spec"]["template"]["metadata"]["labels"][
            "app.kubernetes.io/component"
        ]
        assert component in selected, component
    worker = _one(docs, "NetworkPolicy", "worker")
    assert "ingress" not in worker["spec"]  # nothing may call a worker


def test_serving_metrics_are_scraped_through_the_service_not_a_static_list(overlay: tuple) -> None:
    _, docs = overlay
    monitor = _one(docs, "ServiceMonitor", "portico-serving")
    service = _one(docs, "Service", "portico-serving")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    env = _container(_one(docs, "Deployment", "portico-serving"))["env"]
    address = next(e for e in env if e["name"] == "SERVING_REPLICA_ADDRESS")
    assert address["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_grafana_dashboard_configmap_is_the_shipped_dashboard(overlay: tuple) -> None:
    _, docs = overlay
    config_map = _one(docs, "ConfigMap", "portico-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((KUBERNETES / "base" / "grafana-dashboard.json").read_text())
    assert json.loads(config_map["data"]["portico.json"]) == shipped


def test_console_is_behind_tls_and_a_migrate_job_runs_migrations(overlay: tuple) -> None:
    _, docs = overlay
    ingress = _one(docs, "Ingress", "portico")
    assert ingress["spec"]["tls"][0]["secretName"] == "portico-tls"
    job = _one(docs, "Job", "portico-migrate")
    assert _container(job)["command"][-2:] == ["migrate", "--noinput"]


def _with_component(tmp_path: Path, component: str) -> list[dict[str, Any]]:
    # kustomize takes only relative paths to other kustomizations.
    rel = os.path.relpath(KUBERNETES, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{rel}/overlays/cpu]\ncomponents: [{rel}/components/{component}]\n"
    )
    return _render(tmp_path)


@needs_kubectl
def test_bubblewrap_component_runs_checks_in_the_worker_with_no_api_rights(tmp_path: Path) -> None:
    profile = json.loads((KUBERNETES / "seccomp" / "portico-worker.json").read_text())
    denied = set(profile["syscalls"][0]["names"])
    assert {"kexec_load", "init_module", "bpf", "ptrace", "keyctl"} <= denied
    docs = _with_component(tmp_path, "bubblewrap-validation")
    worker = _one(docs, "Deployment", "portico-worker")
    pod = worker["spec"]["template"]["spec"]
    assert pod["hostUsers"] is False and pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"]["localhostProfile"] == "portico-worker.json"
    assert _env(_container(worker))["PORTICO_VALIDATION_RUNNER"] == "bubblewrap"
    assert _env(_container(worker))["PORTICO_LOADTEST_RUNNER"] == "worker"  # no API, no Jobs
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding", "ClusterRoleBinding")]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _check_job() -> dict[str, Any]:
    limits = CheckLimits(time_limit_s=300, memory_limit_bytes=8 * 1024**3, scratch_bytes=1024**3)
    return check_job_manifest(
        name="portico-check-0123456789ab",
        namespace="portico",
        image="portico:latest",
        cpu="2",
        start_timeout_s=300,
        limits=limits,
        bundle_bytes=1024**2,
    )


def _load_test_job(worker_env: dict[str, Any]) -> dict[str, Any]:
    """The load-test Job the rendered worker would create, from its own settings."""
    pod = LoadTestPodSettings(
        cpu="2",
        memory="4Gi",
        gpus=int(worker_env.get("PORTICO_LOADTEST_KUBERNETES_GPUS") or 0),
        placement=json.loads(worker_env.get("PORTICO_LOADTEST_KUBERNETES_PLACEMENT") or "{}"),
        deadline_s=3600,
        startup_timeout_s=300,
    )
    return load_test_job_manifest(
        name="portico-loadtest-0123456789ab",
        namespace="portico",
        image="portico:latest",
        pod=pod,
        start_timeout_s=300,
        bundle_bytes=1024**2,
    )


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, op, values = expression["key"], expression["operator"], expression.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def test_validation_check_pods_are_denied_every_connection_in_and_out(overlay: tuple) -> None:
    _, docs = overlay
    labels = _check_job()["spec"]["template"]["metadata"]["labels"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    selecting = [p for p in policies if _selects(p["spec"]["podSelector"], labels)]
    assert {p["metadata"]["name"] for p in selecting} == {"default-deny", "validation-check"}
    for policy in selecting:  # policies only add: none of these may allow anything, DNS included
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert not policy["spec"].get("ingress") and not policy["spec"].get("egress")
    # Every other workload still resolves names.
    dns = _one(docs, "NetworkPolicy", "allow-dns")["spec"]["podSelector"]
    for workload in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        assert _selects(dns, workload["spec"]["template"]["metadata"]["labels"])


def test_load_test_pods_are_denied_every_connection_in_and_out(overlay: tuple) -> None:
    _, docs = overlay
    worker_env = _env(_container(_one(docs, "Deployment", "portico-worker")))
    labels = _load_test_job(worker_env)["spec"]["template"]["metadata"]["labels"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    selecting = [p for p in policies if _selects(p["spec"]["podSelector"], labels)]
    assert {p["metadata"]["name"] for p in selecting} == {"default-deny", "load-test"}
    for policy in selecting:  # the load is sent on the pod's loopback: nothing in, nothing out
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert not policy["spec"].get("ingress") and not policy["spec"].get("egress")


def test_load_test_pods_are_placed_like_serving_pods_with_their_gpu(overlay: tuple) -> None:
    kind, docs = overlay
    worker_env = _env(_container(_one(docs, "Deployment", "portico-worker")))
    assert worker_env["PORTICO_LOADTEST_RUNNER"] == "kubernetes"
    serving = _one(docs, "Deployment", "portico-serving")
    serving_pod = serving["spec"]["template"]["spec"]
    job_pod = _load_test_job(worker_env)["spec"]["template"]["spec"]
    for field in PLACEMENT_FIELDS:
        assert job_pod.get(field) == serving_pod.get(field), field
    assert (kind == "gpu") == ("nodeSelector" in job_pod)
    serving_gpus = _container(serving)["resources"]["limits"].get("nvidia.com/gpu", 0)
    (container,) = job_pod["containers"]
    assert int(container["resources"]["limits"].get("nvidia.com/gpu", 0)) == serving_gpus
    # The same account as the checks': no token, no role.
    assert (
        job_pod["serviceAccountName"]
        == _check_job()["spec"]["template"]["spec"]["serviceAccountName"]
    )


def test_worker_may_run_check_jobs_and_nothing_else(overlay: tuple) -> None:
    _, docs = overlay
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("batch", "jobs", "create"), ("batch", "jobs", "get"), ("batch", "jobs", "delete"),
        ("", "pods", "get"), ("", "pods", "list"),
        ("", "pods/attach", "get"), ("", "pods/attach", "create"),
    }  # fmt: skip
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portico-worker", "namespace": "portico"}
    ]
    worker = _container(_one(docs, "Deployment", "portico-worker"))
    assert _env(worker)["PORTICO_VALIDATION_RUNNER"] == "kubernetes"
    api_ports = {p["port"] for r in _one(docs, "NetworkPolicy", "worker")["spec"]["egress"]
                 for p in r["ports"]}  # fmt: skip
    assert {443, 6443} <= api_ports


def test_check_jobs_run_as_an_account_with_no_token_and_no_role(overlay: tuple) -> None:
    _, docs = overlay
    pod = _check_job()["spec"]["template"]["spec"]
    account = _one(docs, "ServiceAccount", pod["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is False
    bound = {s["name"] for d in docs if d["kind"] == "RoleBinding" for s in d["subjects"]}
    assert pod["serviceAccountName"] not in bound
    rendered = json.dumps(_check_job())
    assert "secret" not in rendered.lower() and "envFrom" not in rendered
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True
    assert container["resources"]["limits"]["memory"] and container["resources"]["limits"]["cpu"]
