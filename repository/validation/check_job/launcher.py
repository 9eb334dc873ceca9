"""Run one check as a Kubernetes Job: create it, wait for its pod, attach to the pod's stdin to
stream the bundle, read the framed answer from the same attach stream, then delete the Job.

Everything the worker does with the answer is ``repository.validation.streamed``'s, shared with
the tests' local process; this module holds only the API calls. Any failure of the API itself
(no credentials, forbidden, the pod never starts) is ``SandboxUnavailableError``: validation fails
closed with the reason.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repository.sandbox import CheckLimits, SandboxUnavailableError
from repository.validation.check_job.manifest import CONTAINER, CheckJobSettings, check_job_manifest
from repository.validation.runner import CheckInput, CheckOutcome
from repository.validation.streamed import bundle_for, run_streamed_check

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POLL_S = 1.0
# Short, so that the sender thread waits little for the socket between the reader's polls.
SOCKET_POLL_S = 0.05
EXIT_STATUS_WAIT_S = 60


def run_check_job(
    check: CheckInput, *, limits: CheckLimits, on_step: Callable[[dict[str, Any]], None]
) -> CheckOutcome:
    """Like ``runner.run_check``, in a Job of its own (``BlobIntegrityError`` if a file changed)."""
    job_settings = CheckJobSettings.from_settings()
    with bundle_for(check) as bundle:
        size = bundle.seek(0, 2)
        bundle.seek(0)
        return run_streamed_check(
            bundle,
            start=lambda: CheckPod.start(job_settings, limits=limits, bundle_bytes=size),
            limits=limits,
            on_step=on_step,
        )


class CheckPod:
    """A Job (a check's or a load test's) whose pod is running, with its stdin, stdout and stderr
    attached."""

    def __init__(self, core: Any, batch: Any, namespace: str, job: str, pod: str) -> None:
        self._core, self._batch = core, batch
        self._namespace, self._job, self._pod = namespace, job, pod
        self._socket: Any = None
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls, job_settings: CheckJobSettings, *, limits: CheckLimits, bundle_bytes: int
    ) -> CheckPod:
        return cls.launch(
            job_settings,
            lambda name, namespace, image: check_job_manifest(
                name=name,
                namespace=namespace,
                image=image,
                cpu=job_settings.cpu,
                start_timeout_s=job_settings.start_timeout_s,
                limits=limits,
                bundle_bytes=bundle_bytes,
            ),
            prefix="portico-check",
        )

    @classmethod
    def launch(
        cls,
        job_settings: CheckJobSettings,
        build: Callable[[str, str, str], dict[str, Any]],
        *,
        prefix: str,
    ) -> CheckPod:
        """Create the Job ``build(name, namespace, image)`` returns, wait for its pod to run and
        attach to it (a load test's pod comes through here too)."""
        core, batch = _clients()
        namespace = job_settings.namespace or _own_namespace()
        name = f"{prefix}-{secrets.token_hex(6)}"
        manifest = build(name, namespace, job_settings.image or _own_image(core, namespace))
        from kubernetes.client import V1Job

        _api(lambda: batch.create_namespaced_job(namespace, V1Job.from_dict(manifest)))
        pod = cls(core, batch, namespace, name, "")
        try:
            pod._pod = pod._wait_running(job_settings.start_timeout_s)
            pod._attach()
        except BaseException:
            pod.stop()
            raise
        return pod

    def _wait_running(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        selector = f"job-name={self._job}"
        waiting = "not yet created"
        while time.monotonic() < deadline:
            pods = _api(
                lambda: self._core.list_namespaced_pod(self._namespace, label_selector=selector)
            )
            for pod in pods.items:
                phase = pod.status.phase
                if phase == "Running":
                    return str(pod.metadata.name)
                if phase in ("Failed", "Succeeded"):
                    raise SandboxUnavailableError(
                        f"the pod {pod.metadata.name} ended before it was attached "
                        f"({pod.status.reason or phase})"
                    )
                waiting = _waiting_reason(pod) or str(phase)
            time.sleep(POLL_S)
        raise SandboxUnavailableError(
            f"the pod of job {self._job} did not start within {timeout_s:.0f} s "
            f"(last seen: {waiting}; see `kubectl describe job {self._job}`)"
        )

    def _attach(self) -> None:
        from kubernetes.stream import stream

        self._socket = _api(
            lambda: stream(
                self._core.connect_get_namespaced_pod_attach,
                self._pod,
                self._namespace,
                container=CONTAINER,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                capture_all=False,
                _preload_content=False,
            )
        )

    def send(self, data: bytes) -> None:
        with self._lock:
            self._socket.write_stdin(data)

    def receive(self, timeout_s: float) -> tuple[bytes, bytes] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            try:
                out, err, still_open = self._poll()
            finally:
                self._lock.release()
            if out or err:
                return out, err
            if not still_open:
                return None
        return b"", b""

    def _poll(self) -> tuple[bytes, bytes, bool]:
        try:
            self._socket.update(timeout=SOCKET_POLL_S)
            # NOTE: timeout 0: the client's default (None) would wait for data forever.
            out = self._socket.read_stdout(timeout=0)
            err = self._socket.read_stderr(timeout=0)
            return out, err, bool(self._socket.is_open())
        except Exception:  # noqa: BLE001 - a broken connection ends the stream like a closed one
            return b"", b"", False

    def returncode(self) -> int:
        """The container's exit code (137 when the kernel's OOM killer or a kill ended it)."""
        deadline = time.monotonic() + EXIT_STATUS_WAIT_S
        while time.monotonic() < deadline:
            pod = _api(lambda: self._core.read_namespaced_pod(self._pod, self._namespace))
            for status in pod.status.container_statuses or []:
                if status.name == CONTAINER and status.state.terminated is not None:
                    return int(status.state.terminated.exit_code)
            time.sleep(POLL_S)
        return -1

    def stop(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):
                self._socket.close()
        from kubernetes.client import V1DeleteOptions

        # NOTE: Background propagation deletes the pod with the Job; the TTL and the active
        # deadline clean up should this call fail.
        with contextlib.suppress(Exception):
            self._batch.delete_namespaced_job(
                self._job,
                self._namespace,
                body=V1DeleteOptions(propagation_policy="Background", grace_period_seconds=0),
            )


def _waiting_reason(pod: Any) -> str:
    """Why a pending pod's container waits (ImagePullBackOff, …), if the kubelet said."""
    for status in pod.status.container_statuses or []:
        if status.state is not None and status.state.waiting is not None:
            return str(status.state.waiting.reason or "")
    return ""


def _clients() -> tuple[Any, Any]:
    try:
        from kubernetes import client, config
    except ImportError:
        raise SandboxUnavailableError(
            "PORTICO_VALIDATION_RUNNER is kubernetes but the kubernetes client is not installed"
        ) from None
    try:
        config.load_incluster_config()
    except config.ConfigException as error:
        raise SandboxUnavailableError(f"no in-cluster Kubernetes credentials: {error}") from None
    return client.CoreV1Api(), client.BatchV1Api()


def _own_namespace() -> str:
    try:
        return NAMESPACE_FILE.read_text().strip()
    except OSError as error:
        raise SandboxUnavailableError(f"cannot tell the worker's namespace: {error}") from None


def _own_image(core: Any, namespace: str) -> str:
    """The worker's own image, so the check runs exactly the worker's code."""
    import socket

    pod = _api(lambda: core.read_namespaced_pod(socket.gethostname(), namespace))
    return str(pod.spec.containers[0].image)


def _api(call: Callable[[], Any]) -> Any:
    from kubernetes.client.exceptions import ApiException
    from websocket import WebSocketException

    try:
        return call()
    except ApiException as error:
        raise SandboxUnavailableError(
            f"the Kubernetes API refused: {error.status} {error.reason}"
        ) from None
    except (OSError, WebSocketException) as error:
        raise SandboxUnavailableError(f"the Kubernetes API could not be reached: {error}") from None
