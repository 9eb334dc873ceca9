"""Validate one version: config parse, checksums, then ``serving.check`` for load, I/O, warm-up and
golden requests. The outcome lands on the version row in one transaction: ready or failed."""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from repository.config import ConfigError
from repository.errors import BlobIntegrityError, RegistryError
from repository.models import (
    Event,
    GoldenRequest,
    GoldenState,
    GpuCheck,
    ModelVersion,
    VersionState,
)
from repository.sandbox import CheckLimits, SandboxUnavailableError, sandbox_disabled
from repository.services.events import event_record
from repository.services.live import version_progress_publish
from repository.services.revision import serving_revision_bump
from repository.validation.check_runner import (
    RUNNER_KUBERNETES,
    check_run,
    check_runner,
    registry_files,
)
from repository.validation.effective import autocompleted_field_names, effective_config_text
from repository.validation.golden_verdict import golden_verdicts
from repository.validation.materialise import version_materialise
from repository.validation.report import FAILED, StepFailed, StepRecorder
from repository.validation.runner import CheckInput

logger = logging.getLogger(__name__)

# A version whose runs were abandoned this many times in a row fails with that reason rather than
# take down yet another worker: re-validated or failed, never left validating.
MAX_ABANDONED_RUNS = 3


class ValidationBusyError(RegistryError):
    """Another run is validating this version right now; try again after it can have finished."""

    code = "validation_busy"

    def __init__(self, version_id: int, retry_after_s: float) -> None:
        super().__init__(
            f"version {version_id} is being validated",
            version_id=version_id,
            retry_after_s=retry_after_s,
        )
        self.retry_after_s = retry_after_s


@dataclasses.dataclass
class Verdict:
    ok: bool
    config_text: str = ""
    autocompleted_fields: list[str] = dataclasses.field(default_factory=list)
    error: str = ""
    golden: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gpu_check_pending: str = ""  # why a GPU replica must still check it; "" when nothing is left


def validation_stale_after() -> timedelta:
    # A validating version whose run started longer ago than the limit plus this grace is taken
    # to be abandoned (its worker died) and is validated again.
    grace = float(settings.PORTICO_VALIDATION_STALE_GRACE_S)
    if check_runner() == RUNNER_KUBERNETES:
        # A check Job may wait this long for its pod (scheduling, image pull) before its limit runs.
        grace += float(settings.PORTICO_VALIDATION_KUBERNETES_START_TIMEOUT_S)
    return timedelta(seconds=CheckLimits.from_settings().time_limit_s + grace)


def version_validate_run(version_id: int) -> ModelVersion | None:
    """Validate a version end to end. Returns None when there is nothing to do (terminal, gone)."""
    version = _begin(version_id)
    if version is None:
        return None
    recorder = StepRecorder(version)
    abandoned = _abandoned_runs(version)
    if abandoned >= MAX_ABANDONED_RUNS:
        error = (f"validation was abandoned {abandoned} times: the worker running it died each "
                 "time (killed, or out of memory); it is not run again")  # fmt: skip
        return _finish(version_id, recorder, Verdict(ok=False, error=error))
    try:
        with tempfile.TemporaryDirectory(prefix="portico-validate-") as tmp:
            verdict = _run(version, Path(tmp), recorder)
    except Exception as exc:  # noqa: BLE001 - any crash must still end in a failed report
        logger.exception("validation of version %s crashed", version_id)
        verdict = Verdict(ok=False, error=f"validation crashed: {exc}")
    return _finish(version_id, recorder, verdict)


def _abandoned_runs(version: ModelVersion) -> int:
    """Runs of ``version`` that started and never ended (their worker died) before this one."""
    events = Event.objects.filter(model=version.model, to_version=version.number)
    ended = events.filter(action__in=[Event.Action.VALIDATED, Event.Action.VALIDATION_FAILED])
    last_end = ended.aggregate(last=Max("pk"))["last"] or 0
    started = events.filter(action=Event.Action.VALIDATION_STARTED, pk__gt=last_end).count()
    return max(0, started - 1)  # this run's own start is one of them


def _locked_version(version_id: int) -> ModelVersion | None:
    """The version row, locked until the caller's transaction ends; None once deleted."""
    return (
        ModelVersion.objects.select_for_update()
        .select_related("model")
        .filter(pk=version_id)
        .first()
    )


def _begin(version_id: int) -> ModelVersion | None:
    with transaction.atomic():
        version = _locked_version(version_id)
        if version is None:
            logger.info("version %s no longer exists; nothing to validate", version_id)
            return None
        if version.is_terminal_for_validation:
            return None
        now = timezone.now()
        if version.state == VersionState.VALIDATING and version.validation_started_at:
            stale_at = version.validation_started_at + validation_stale_after()
            if stale_at > now:
                raise ValidationBusyError(version_id, (stale_at - now).total_seconds())
            logger.warning("version %s: abandoned validation is run again", version_id)
        version.state = VersionState.VALIDATING
        version.validation_started_at = now
        version.validation_steps = []
        version.validation_error = ""
        version.save(
            update_fields=["state", "validation_started_at", "validation_steps", "validation_error"]
        )
        event_record(
            actor=None,
            action=Event.Action.VALIDATION_STARTED,
            model=version.model,
            to_version=version.number,
            detail=_sandbox_detail(),
        )
    version_progress_publish(version)
    return version


def _sandbox_detail() -> dict[str, Any]:
    """Each run with the sandbox switched off says so in the audit log, next to its version."""
    if not sandbox_disabled():
        return {}
    return {"sandbox": "off", "warning": "uploaded code ran outside the validation sandbox"}


def _run(version: ModelVersion, tmp: Path, recorder: StepRecorder) -> Verdict:
    try:
        with recorder.step("parse"):
            _check_submitted_config(version)
        with recorder.step("checksums") as out:
            model_dir, version_dir = _materialise(version, tmp / "repo")
            out["message"] = f"{version.files.count()} files verified"
    except StepFailed as exc:
        return Verdict(ok=False, error=str(exc))
    return _run_check(version, tmp, model_dir, version_dir, recorder)


def _check_submitted_config(version: ModelVersion) -> None:
    text = version.submitted_config_text
    if not text:
        return
    from repository.config import ConfigError, parse_config_text

    try:
        cfg = parse_config_text(text)
    except ConfigError as exc:
        problems = [
            p if p.startswith("config.pbtxt") else f"config.pbtxt: {p}" for p in exc.problems
        ]
        raise StepFailed("; ".join(problems)) from exc
    if cfg.name and cfg.name != version.model.name:
        raise StepFailed(
            f"config.pbtxt: name: '{cfg.name}' does not match the model name '{version.model.name}'"
        )


def _materialise(version: ModelVersion, root: Path) -> tuple[Path, Path]:
    try:
        return version_materialise(version, root)
    except BlobIntegrityError as exc:
        raise StepFailed(exc.message) from exc
    except OSError as exc:
        raise StepFailed(f"could not read the stored files: {exc}") from exc


def _run_check(
    version: ModelVersion, tmp: Path, model_dir: Path, version_dir: Path, recorder: StepRecorder
) -> Verdict:
    config_file = None
    if version.submitted_config_text:
        config_file = tmp / "submitted.pbtxt"
        config_file.write_text(version.submitted_config_text, encoding="utf-8")
    goldens = list(
        GoldenRequest.objects.filter(model=version.model, state=GoldenState.RECORDED).order_by("pk")
    )
    check = CheckInput(
        input_dir=tmp,
        model_dir=model_dir,
        version_dir=version_dir,
        config_file=config_file,
        golden_file=_write_golden_file(goldens, tmp / "golden.json"),
        files=registry_files(version, tmp, model_dir, version_dir),
    )
    try:
        outcome = check_run(check, limits=CheckLimits.from_settings(), on_step=recorder.add)
    except SandboxUnavailableError as exc:
        recorder.add({"name": "sandbox", "status": FAILED, "message": exc.message})
        return Verdict(ok=False, error=f"sandbox: {exc.message}")
    except BlobIntegrityError as exc:
        recorder.add({"name": "bundle", "status": FAILED, "message": exc.message})
        return Verdict(ok=False, error=exc.message)
    report = outcome.report
    if report is None:
        reason = outcome.failure_reason()
        recorder.add({"name": "check", "status": FAILED, "message": reason, "duration_ms": 0})
        return Verdict(ok=False, error=reason)
    golden = golden_verdicts(goldens, _golden(report)) if goldens else []
    if not report.get("ok") or recorder.failed_step is not None:
        return Verdict(ok=False, error=_report_error(report, recorder, golden), golden=golden)
    if outcome.returncode != 0:
        # A report claiming success from a check that did not exit cleanly is not believed.
        reason = f"the report claims success but {outcome.failure_reason()}"
        recorder.add({"name": "check", "status": FAILED, "message": reason, "duration_ms": 0})
        return Verdict(ok=False, error=reason)
    return _verify(version, report, golden, recorder)


def _verify(
    version: ModelVersion,
    report: dict[str, Any],
    golden: list[dict[str, Any]],
    recorder: StepRecorder,
) -> Verdict:
    """The worker's own checks of a passing report: its config, then the golden outputs."""
    try:
        with recorder.step("verify-config") as out:
            config_text = _effective_config(version, report)
            out["message"] = "the effective config is valid and keeps the model's identity"
        if golden:
            with recorder.step("verify-golden") as out:
                failed = [g for g in golden if not g["ok"]]
                if failed:
                    raise StepFailed(_golden_error(failed))
                out["message"] = f"{len(golden)} golden request(s) match the recorded outputs"
    except StepFailed as exc:
        return Verdict(ok=False, error=str(exc), golden=golden)
    return Verdict(
        ok=True,
        config_text=config_text,
        autocompleted_fields=autocompleted_field_names(report.get("autocompleted_fields")),
        golden=golden,
        gpu_check_pending=str(report.get("gpu_check_pending") or ""),
    )


def _effective_config(version: ModelVersion, report: dict[str, Any]) -> str:
    try:
        return effective_config_text(
            claimed=report.get("config_text"),
            model_name=version.model.name,
            submitted_text=version.submitted_config_text or "",
        )
    except ConfigError as exc:
        raise StepFailed("; ".join(exc.problems) or str(exc)) from None


def _write_golden_file(goldens: list[GoldenRequest], path: Path) -> Path | None:
    """Inputs only: the expected outputs stay with the worker, which compares."""
    entries = [golden_entry(g, expected=False) for g in goldens]
    if not entries:
        return None
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def golden_entry(golden: GoldenRequest, *, expected: bool) -> dict[str, Any]:
    """One request of the ``--golden`` file ``serving.check`` reads."""
    return {
        "id": golden.pk,
        "name": golden.name,
        "inputs": golden.inputs,
        "outputs": golden.expected_outputs if expected else None,
        "rtol": golden.rtol,
        "atol": golden.atol,
    }


def _golden(report: dict[str, Any]) -> list[dict[str, Any]]:
    golden = report.get("golden") or []
    return [g for g in golden if isinstance(g, dict)]


def _report_error(
    report: dict[str, Any], recorder: StepRecorder, golden: list[dict[str, Any]]
) -> str:
    steps = [s for s in report.get("steps") or [] if isinstance(s, dict)]
    failed = recorder.failed_step or next((s for s in steps if s.get("status") == FAILED), None)
    if failed is None:
        return "the check failed without naming a step"
    failures = [g for g in golden if not g["ok"]]
    if failed.get("name") == "golden" and failures:
        return _golden_error(failures)
    return f"{failed.get('name')}: {failed.get('message', '')}"


def _golden_error(failures: list[dict[str, Any]]) -> str:
    """Name each failing golden request (by its name, not its id) and the outputs that differ."""
    parts = [f"golden request '{g['name']}': {g['message']}" for g in failures]
    return "golden: " + "; ".join(parts)


def _finish(version_id: int, recorder: StepRecorder, verdict: Verdict) -> ModelVersion | None:
    with transaction.atomic():
        version = _locked_version(version_id)
        if version is None or version.state != VersionState.VALIDATING:
            return version
        _apply(version, recorder, verdict)
        _record_golden_results(version, verdict.golden)
        event_record(
            actor=None,
            action=Event.Action.VALIDATED if verdict.ok else Event.Action.VALIDATION_FAILED,
            model=version.model,
            to_version=version.number,
            detail={} if verdict.ok else {"error": verdict.error},
        )
        if verdict.ok:
            serving_revision_bump()  # a ready version is loadable by explicit version
    version_progress_publish(version)
    if verdict.ok and version.promote_when_ready:
        _auto_promote(version)
    return version


def _auto_promote(version: ModelVersion) -> None:
    """Promote an imported version once valid, unless a higher version is already promoted."""
    from repository.services.promotion import model_version_promote

    current = ModelVersion.objects.filter(
        model_id=version.model_id, state=VersionState.PROMOTED
    ).first()
    if current is not None and current.number > version.number:
        return
    try:
        model_version_promote(version=version, actor=None)
    except RegistryError as exc:
        logger.warning("imported %s was not promoted: %s", version, exc.message)
    version.refresh_from_db()


def _apply(version: ModelVersion, recorder: StepRecorder, verdict: Verdict) -> None:
    version.validation_steps = recorder.steps
    version.validated_at = timezone.now()
    version.validation_error = verdict.error
    version.state = VersionState.READY if verdict.ok else VersionState.FAILED
    fields = ["validation_steps", "validated_at", "validation_error", "state"]
    if verdict.ok:
        version.config_text = verdict.config_text
        version.autocompleted_fields = verdict.autocompleted_fields
        version.backend = _backend_of(verdict.config_text)
        version.needs_approval = version.needs_approval or version.backend == "python"
        fields += ["config_text", "autocompleted_fields", "backend", "needs_approval"]
        pending = verdict.gpu_check_pending
        version.gpu_check = GpuCheck.PENDING if pending else GpuCheck.NOT_NEEDED
        version.gpu_check_message = pending
        fields += ["gpu_check", "gpu_check_message"]
        _model_backend_update(version)
    version.save(update_fields=fields)


def _parsed(config_text: str) -> Any:
    from repository.config import ConfigError, parse_config_text

    try:
        return parse_config_text(config_text) if config_text else None
    except ConfigError:
        return None


def _backend_of(config_text: str) -> str:
    cfg = _parsed(config_text)
    return str(cfg.backend or cfg.platform) if cfg is not None else ""


def _model_backend_update(version: ModelVersion) -> None:
    """The model shows the backend and platform of its latest valid version."""
    model = version.model
    cfg = _parsed(version.config_text)
    platform = str(cfg.platform) if cfg is not None else ""
    if (model.backend, model.platform) != (version.backend, platform):
        model.backend, model.platform = version.backend, platform
        model.save(update_fields=["backend", "platform"])


def _record_golden_results(version: ModelVersion, golden: list[dict[str, Any]]) -> None:
    for result in golden:
        GoldenRequest.objects.filter(pk=result.get("id"), model=version.model).update(
            last_results={
                "version": version.number,
                "ok": bool(result.get("ok")),
                "message": str(result.get("message", "")),
            }
        )
