"""Run a load test or a tuning in the worker: claim the row, materialise the version into a
private folder, serve it on a loopback port, measure, write progress and results to the row.

The measuring runs on a thread of its own while this (the Django) thread keeps the row's
heartbeat fresh and watches for a cancel request, so a cancel stops a run within about a second.

With ``PORTICO_LOADTEST_RUNNER=kubernetes`` each served config is a Job of its own instead
(``pod_job``, ``remote``): one pod per config, not per run, because starting the server is the
slow part and the sweep's early stop at the knee stays here; each setting is written to the row
as it finishes, so a resumed tuning starts no pod for the ones done.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from repository.config.parse import parse_config_text
from repository.models import GoldenRequest, GoldenState, ModelVersion, SampleInput
from repository.tuning import pod_job
from repository.tuning.inputs import request_bodies
from repository.tuning.launcher import PrivateServer, private_server
from repository.tuning.loadgen import Shape, Target
from repository.tuning.loadgen_perf_analyzer import PerfAnalyzer, perf_analyzer_binary
from repository.tuning.measure import RunResult, measure
from repository.tuning.models import TERMINAL_JOB_STATES, Job, JobState
from repository.tuning.remote import RemoteServer, load_test_input
from repository.tuning.services import STALE_AFTER, job_finish
from repository.validation.check_runner import registry_files
from repository.validation.materialise import CONFIG_NAME, version_materialise

T = TypeVar("T")
WATCH_INTERVAL_S = 0.5


class JobCancelledError(Exception):
    """The job's cancel was requested while it ran."""


class Workbench:
    """One claimed job on its way: a private copy of the version and a watched measuring thread."""

    def __init__(self, job: Job, root: Path) -> None:
        self.job, self.root, self.stop = job, root, threading.Event()
        version: ModelVersion = job.version
        self.model, self.number = version.model.name, version.number
        self.in_pod = pod_job.runs_in_pods()
        candidates, kind = _candidates(job)
        self.bodies, self.inputs_source = request_bodies(
            config_text=version.config_text, candidates=candidates, kind=kind
        )
        if self.in_pod:
            # Packed from the registry's files alone (re-hashed on the way), the config beside.
            self.model_dir, self.version_dir = version_materialise(version, root / "version")
            self.files = registry_files(version, root, self.model_dir, self.version_dir)
            self.perf_analyzer = None  # the pod sends its load with the built-in client
        else:
            self.model_dir, _ = version_materialise(version, root, config_text=version.config_text)
            self.perf_analyzer = _perf_analyzer(self.bodies, version.config_text, root)

    def serve(self, config_text: str) -> Any:
        limit = float(settings.PORTICO_VALIDATION_TIME_LIMIT_S)
        if self.in_pod:
            return self._serve_in_pod(config_text, limit)
        (self.model_dir / CONFIG_NAME).write_text(config_text, encoding="utf-8")
        return private_server(self.root, startup_timeout_s=limit)

    @contextlib.contextmanager
    def _serve_in_pod(self, config_text: str, limit_s: float) -> Iterator[RemoteServer]:
        check = load_test_input(
            self.root,
            self.version_dir,
            self.files,
            config_text=config_text,
            model=self.model,
            version=self.number,
            bodies=self.bodies,
        )
        with contextlib.closing(RemoteServer(check, start=pod_job.load_test_pod_start)) as server:
            self.report(self.job.progress, "starting the load-test pod")
            self.watched(lambda: server.open(limit_s, self.stop))
            yield server

    def run(
        self, server: PrivateServer | RemoteServer, shape: Shape, progress: float, note: str
    ) -> RunResult:
        self.report(progress, note)
        if isinstance(server, RemoteServer):
            return self.watched(lambda: server.measure(shape, self.stop))
        target = Target(
            url=server.url,
            path=f"/v2/models/{self.model}/versions/{self.number}/infer",
            bodies=self.bodies,
        )
        return self.watched(
            lambda: measure(
                server,
                target,
                shape,
                model=self.model,
                version=self.number,
                stop=self.stop,
                perf_analyzer=self.perf_analyzer,
            )
        )

    def watched(self, work: Callable[[], T]) -> T:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(work)
            while True:
                try:
                    result = future.result(timeout=WATCH_INTERVAL_S)
                    break
                except concurrent.futures.TimeoutError:
                    self.beat()
                except Exception:
                    if self.stop.is_set():  # a pod stopped for the cancel fails its call
                        raise JobCancelledError from None
                    raise
        self.beat()
        if self.stop.is_set():
            raise JobCancelledError
        return result

    def beat(self) -> None:
        model = type(self.job)
        model.objects.filter(pk=self.job.pk).update(heartbeat_at=timezone.now())
        if model.objects.filter(pk=self.job.pk, cancel_requested=True).exists():
            self.stop.set()

    def report(self, progress: float, message: str) -> None:
        self.job.progress, self.job.message = min(max(progress, 0.0), 1.0), message[:300]
        type(self.job).objects.filter(pk=self.job.pk).update(
            progress=self.job.progress, message=self.job.message, heartbeat_at=timezone.now()
        )


def job_claim(model: type[Job], job_id: int) -> Job | None:
    """Lock and mark the job running; None when it is finished, gone, or alive elsewhere."""
    with transaction.atomic():
        job = model.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state in TERMINAL_JOB_STATES:
            return None
        fresh = timezone.now() - (
            job.heartbeat_at or datetime.datetime.min.replace(tzinfo=datetime.UTC)
        )
        if job.state == JobState.RUNNING and fresh < STALE_AFTER:
            return None
        job.state, job.attempts = JobState.RUNNING, job.attempts + 1
        job.started_at = job.started_at or timezone.now()
        job.heartbeat_at = timezone.now()
        job.save()
    return job


def job_execute(job: Job, work: Callable[[Workbench], None]) -> Job:
    """Run ``work`` on a workbench for ``job`` and record how it ended."""
    try:
        with tempfile.TemporaryDirectory(prefix="portico-loadtest-") as folder:
            work(Workbench(job, Path(folder)))
    except JobCancelledError:
        job_finish(job=job, state=JobState.CANCELLED, message="cancelled")
    except Exception as exc:  # noqa: BLE001 - any failure ends the job with its reason
        job_finish(job=job, state=JobState.FAILED, error=f"{type(exc).__name__}: {exc}")
    else:
        job_finish(job=job, state=JobState.SUCCEEDED, message="done")
    return job


def _perf_analyzer(bodies: list[bytes], config_text: str, root: Path) -> PerfAnalyzer | None:
    """perf_analyzer when one is configured or on PATH (its numbers do not carry the built-in
    client's CPU cost on the server's cores); None keeps the built-in client."""
    binary = perf_analyzer_binary(settings.PORTICO_PERF_ANALYZER)
    if binary is None:
        return None
    batched = parse_config_text(config_text).max_batch_size > 0
    return PerfAnalyzer.prepare(binary, bodies, batched=batched, folder=root)


def _candidates(job: Job) -> tuple[list[list[dict[str, Any]]], str]:
    """The inputs to send and what they are: the job's own, else the version's uploaded sample
    inputs, else the model's recorded golden requests."""
    given = (job.parameters or {}).get("inputs")
    if given:
        return [given], "request(s) given with the job"
    uploaded = SampleInput.objects.filter(version=job.version).order_by("pk")
    if uploaded.exists():
        return [sample.inputs for sample in uploaded], "uploaded sample input(s)"
    goldens = GoldenRequest.objects.filter(
        model_id=job.version.model_id, state=GoldenState.RECORDED
    )
    return [g.inputs for g in goldens.order_by("pk")], "recorded request(s)"
