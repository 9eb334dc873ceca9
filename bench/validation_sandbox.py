"""`python -m bench.validation_sandbox [--rounds N]`: what the validation sandbox costs.

Validates the same uploaded versions (a small ONNX MLP and Triton's Python ``add_sub``) with the
check inside bubblewrap and with the sandbox switched off, in alternating rounds (the order flips
every round), timing the worker's whole validation of each (materialise, check child, re-checks,
the row updates). Runs on the embedded default in a throw-away folder and rewrites the
"validation-sandbox" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench import report

MODES = ("bwrap", "off")


def _setup(var_dir: Path) -> None:
    os.environ["PORTICO_VAR_DIR"] = str(var_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _zipped(model_dir: Path) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path in sorted(model_dir.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(model_dir).as_posix())
    buf.seek(0)
    return buf


def _models(root: Path) -> dict[str, Path]:
    from repository import demo_models

    return {
        "onnx": demo_models.write_onnx_mlp(root, name="mlp", sizes=(64, 128, 16)),
        "python": demo_models.write_python_add_sub(root, name="add_sub"),
    }


def _validate_once(model_dir: Path, name: str, mode: str, user: Any) -> float:
    """Seconds for one validation of a fresh upload of ``model_dir`` with the sandbox ``mode``."""
    from django.conf import settings

    from repository.services import model_version_create_from_upload, model_version_validate

    settings.PORTICO_VALIDATION_SANDBOX = mode
    version = model_version_create_from_upload(
        model_name=name, uploaded_by=user, archive=_zipped(model_dir), archive_name="m.zip"
    )
    started = time.perf_counter()
    model_version_validate(version_id=version.pk)
    elapsed = time.perf_counter() - started
    version.refresh_from_db()
    if version.state != "ready":
        raise RuntimeError(f"{name} ({mode}) did not validate: {version.validation_error}")
    return elapsed


def measure(rounds: int, root: Path) -> dict[tuple[str, str], list[float]]:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench")
    times: dict[tuple[str, str], list[float]] = {}
    models = _models(root / "models")
    for kind, model_dir in models.items():
        _validate_once(model_dir, model_dir.name, "off", user)  # warm the page cache
        for index in range(rounds):
            order = MODES if index % 2 == 0 else MODES[::-1]
            for mode in order:
                seconds = _validate_once(model_dir, model_dir.name, mode, user)
                times.setdefault((kind, mode), []).append(seconds)
    return times


def _section(times: dict[tuple[str, str], list[float]], rounds: int) -> str:
    rows = []
    for kind in ("onnx", "python"):
        inside, outside = times[(kind, "bwrap")], times[(kind, "off")]
        paired = [a - b for a, b in zip(inside, outside, strict=True)]
        rows.append(
            [
                {"onnx": "ONNX MLP 64→128→16", "python": "Python add_sub"}[kind],
                f"{statistics.median(outside):.2f}",
                f"{statistics.median(inside):.2f}",
                f"{statistics.median(inside) - statistics.median(outside):+.2f}",
                f"{statistics.median(paired):+.2f}",
            ]
        )
    headers = [
        "model",
        "median s, sandbox off",
        "median s, in bubblewrap",
        "difference of medians s",
        "median per-round difference s",
    ]
    return "\n\n".join(
        [
            "## Validation sandbox overhead",
            report.machine_line().replace(", load generator on the same machine", ""),
            "`python -m bench.validation_sandbox --rounds "
            f"{rounds}`: one upload validated end to end per round and condition (the worker's "
            "whole run: materialise, the check child, the re-checks, the row updates), rounds "
            "alternating the order of the two conditions; medians.",
            report.table(headers, rows),
            f"Load average while measuring: {os.getloadavg()[0]:.1f} (the machine is shared; "
            "single runs vary by more than the difference, hence paired rounds and medians).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.validation_sandbox")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="portico-bench-") as tmp:
        root = Path(tmp)
        _setup(root / "var")
        times = measure(args.rounds, root)
    section = _section(times, args.rounds)
    report.write_section("validation-sandbox", section)
    print(section)


if __name__ == "__main__":
    main()
