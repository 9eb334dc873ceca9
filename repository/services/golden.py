"""Golden requests: record trusted outputs from a version, delete, and (in validation) replay."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from django.db import transaction

from repository.errors import BlobIntegrityError, GoldenRequestError, InvalidStateError
from repository.models import Event, GoldenRequest, GoldenState, Model, ModelVersion, VersionState
from repository.services.events import event_record

logger = logging.getLogger(__name__)

RECORDABLE = [VersionState.READY, VersionState.PROMOTED, VersionState.RETIRED]


def golden_request_record(
    *,
    model: Model,
    name: str,
    inputs: list[dict[str, Any]],
    version: ModelVersion,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    actor: Any = None,
    sync: bool = False,
) -> GoldenRequest:
    """Store a golden request and record its expected outputs by running ``inputs`` on ``version``.

    Recording runs in the worker (the request is ``recording`` until then) or inline with ``sync``.
    """
    _check_request(name=name, inputs=inputs, rtol=rtol, atol=atol)
    if version.model_id != model.pk:
        raise GoldenRequestError("the version belongs to another model", model=model.name)
    if version.state not in RECORDABLE:
        raise InvalidStateError(
            model.name,
            version.number,
            state=version.state,
            action="record golden requests on",
            allowed=[s.value for s in RECORDABLE],
        )
    with transaction.atomic():
        if GoldenRequest.objects.filter(model=model, name=name).exists():
            raise GoldenRequestError(
                f"model '{model.name}' already has a golden request named '{name}'",
                model=model.name,
                name=name,
            )
        golden = GoldenRequest.objects.create(
            model=model,
            name=name,
            inputs=inputs,
            rtol=rtol,
            atol=atol,
            recorded_from=version,
            state=GoldenState.RECORDING,
            created_by=actor if actor is not None and actor.pk else None,
        )
        event_record(
            actor=actor,
            action=Event.Action.GOLDEN_RECORD,
            model=model,
            to_version=version.number,
            detail={"golden": name},
        )
        if not sync:
            transaction.on_commit(lambda: _delay(golden.pk))
    if sync:
        return golden_request_record_run(golden_id=golden.pk) or golden
    return golden


def golden_request_delete(*, golden: GoldenRequest, actor: Any) -> None:
    """Delete a golden request; later validations stop replaying it."""
    with transaction.atomic():
        event_record(
            actor=actor,
            action=Event.Action.GOLDEN_DELETE,
            model=golden.model,
            detail={"golden": golden.name},
        )
        golden.delete()


def golden_request_record_run(*, golden_id: int) -> GoldenRequest | None:
    """Run a recording golden request on its version in the check child and store its outputs."""
    from repository.sandbox import SandboxUnavailableError
    from repository.validation.check_runner import check_run, registry_files
    from repository.validation.materialise import version_materialise
    from repository.validation.pipeline import golden_entry
    from repository.validation.runner import CheckInput, CheckLimits

    golden = (
        GoldenRequest.objects.select_related("recorded_from__model").filter(pk=golden_id).first()
    )
    if golden is None or golden.state != GoldenState.RECORDING or golden.recorded_from is None:
        return golden
    version = golden.recorded_from
    with tempfile.TemporaryDirectory(prefix="portico-golden-") as tmp_name:
        tmp = Path(tmp_name)
        model_dir, version_dir = version_materialise(
            version, tmp / "repo", config_text=version.config_text or None
        )
        golden_file = tmp / "golden.json"
        golden_file.write_text(json.dumps([golden_entry(golden, expected=False)]))
        config_file = model_dir / "config.pbtxt"
        check = CheckInput(
            input_dir=tmp,
            model_dir=model_dir,
            version_dir=version_dir,
            # NOTE: named, so that a check pod's bundle carries the config the worker wrote.
            config_file=config_file if config_file.is_file() else None,
            golden_file=golden_file,
            files=registry_files(version, tmp, model_dir, version_dir),
        )
        try:
            outcome = check_run(check, limits=CheckLimits.from_settings(), on_step=lambda s: None)
        except (SandboxUnavailableError, BlobIntegrityError) as exc:
            return _record_failed(golden, exc.message)
    result = _golden_result(outcome.report, golden.pk)
    if result is not None and result.get("outputs"):
        golden.expected_outputs = result["outputs"]
        golden.state, golden.error = GoldenState.RECORDED, ""
    else:
        golden.state = GoldenState.FAILED
        golden.error = (
            str(result.get("message") or "no outputs") if result else outcome.failure_reason()
        )
    golden.save(update_fields=["expected_outputs", "state", "error"])
    return golden


def _record_failed(golden: GoldenRequest, reason: str) -> GoldenRequest:
    golden.state, golden.error = GoldenState.FAILED, reason
    golden.save(update_fields=["state", "error"])
    return golden


def _golden_result(report: dict[str, Any] | None, golden_id: int) -> dict[str, Any] | None:
    for result in (report or {}).get("golden") or []:
        if isinstance(result, dict) and result.get("id") == golden_id:
            return result
    return None


def _check_request(*, name: str, inputs: list[dict[str, Any]], rtol: float, atol: float) -> None:
    problems = []
    if not name or len(name) > 128:
        problems.append("name: required, at most 128 characters")
    if not isinstance(inputs, list) or not inputs:
        problems.append("inputs: a non-empty list of KServe v2 JSON inputs")
    else:
        for i, item in enumerate(inputs):
            if not isinstance(item, dict) or not {"name", "datatype", "shape", "data"} <= set(item):
                problems.append(f"inputs[{i}]: needs name, datatype, shape and data")
    if rtol < 0 or atol < 0:
        problems.append("rtol/atol: must not be negative")
    if problems:
        raise GoldenRequestError("; ".join(problems), problems=problems)


def _delay(golden_id: int) -> None:
    from repository.tasks import record_golden_request

    try:
        record_golden_request.delay(golden_id)
    except Exception:  # noqa: BLE001 - a broker failure leaves the request recording, logged
        logger.exception("could not enqueue recording of golden request %s", golden_id)
