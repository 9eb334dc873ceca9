"""Golden requests judged by the worker: the check child gets the inputs only and returns the
raw outputs; the worker compares them with the recorded ones. A model cannot see what it is
expected to answer, and its own "ok" is never what passes a golden request."""

from __future__ import annotations

from typing import Any

from repository.config.golden import compare_outputs
from repository.models import GoldenRequest

MAX_MESSAGE_CHARS = 500


def golden_verdicts(
    goldens: list[GoldenRequest], results: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One ``{"id", "name", "ok", "message"}`` per golden request, in the order given."""
    by_id = {r.get("id"): r for r in results if isinstance(r, dict)}
    return [_verdict(golden, by_id.get(golden.pk)) for golden in goldens]


def _verdict(golden: GoldenRequest, result: dict[str, Any] | None) -> dict[str, Any]:
    verdict: dict[str, Any] = {"id": golden.pk, "name": golden.name, "ok": False, "message": ""}
    if result is None:
        verdict["message"] = "the check returned no result for it"
    elif not result.get("ok"):
        verdict["message"] = str(result.get("message") or "it failed")[:MAX_MESSAGE_CHARS]
    elif not isinstance(result.get("outputs"), dict):
        verdict["message"] = "the check returned no outputs for it"
    else:
        problems = compare_outputs(
            result["outputs"], golden.expected_outputs or {}, rtol=golden.rtol, atol=golden.atol
        )
        verdict["ok"] = not problems
        verdict["message"] = "; ".join(problems) or "matches the recorded outputs"
    return verdict
