"""Check a candidate model version the way serving would load it, and report step by step.

``python -m serving.check --model-dir DIR --version-dir DIR [--config FILE] [--golden FILE]
--report FILE`` completes the config (``repository.config.complete_config`` plus the Python
backend's ``auto_complete_config``), loads one instance with the real backend (the same code the
server runs), compares the declared inputs and outputs with the artifact's, warms it up (the
config's ``model_warmup``, else a generated request of the declared shapes) and replays golden
requests.
Each step is printed as one JSON line when it finishes, so a parent can stream progress; the full
report is written to ``--report``. Exit status 0 when every step passed, 1 otherwise.

``python -m serving.check --bundle-stdin --scratch DIR`` reads the version from stdin instead and
answers on stdout in frames (``serving.check_bundle``): the form a check pod runs in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.errors import ServingError

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
SKIP_PREFIX = "skipped:"  # a step returning "skipped:<why>" is reported as skipped
DEFAULT_MAX_BUNDLE_BYTES = 8 * 1024**3


class StepFailed(Exception):
    """A step's failure, with the message the report shows."""


@dataclasses.dataclass
class Check:
    """The state one check run builds up; ``report()`` is what lands in ``--report``."""

    model_dir: Path
    version_dir: Path
    config_text: str | None
    golden: list[dict[str, Any]] | None
    emit: Callable[[dict[str, Any]], None]
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    spec: ModelSpec | None = None
    instance: ModelInstance | None = None
    autocompleted_fields: list[str] = dataclasses.field(default_factory=list)
    golden_results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    artifact: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Why the GPU part of this version is left to the first GPU replica; "" when nothing is left.
    gpu_check_pending: str = ""

    def run(self) -> dict[str, Any]:
        try:
            self.step("config", self._config)
            self.step("load", self._load)
            self.step("io", self._io)
            self.step("warmup", self._warmup)
            self.step("golden", self._golden)
        finally:
            if self.instance is not None:
                self.instance.unload()
        return self.report()

    def step(self, name: str, action: Callable[[], str | None]) -> None:
        started = time.monotonic()
        if any(s["status"] == FAILED for s in self.steps):
            status, message = SKIPPED, "an earlier step failed"
        else:
            try:
                result = action() or ""
                skipped = result.startswith(SKIP_PREFIX)
                status = SKIPPED if skipped else PASSED
                message = result.removeprefix(SKIP_PREFIX)
            except StepFailed as failure:
                status, message = FAILED, str(failure)
            except ServingError as error:
                status, message = FAILED, error.message
            except Exception as error:  # noqa: BLE001 - any surprise is this step's failure
                status, message = FAILED, f"{type(error).__name__}: {error}"
        entry = {
            "name": name,
            "status": status,
            "message": message or "",
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        self.steps.append(entry)
        self.emit(entry)

    def report(self) -> dict[str, Any]:
        from serving.check_io import declared_io

        config = self.spec.config if self.spec is not None else None
        return {
            "ok": bool(self.steps) and all(s["status"] != FAILED for s in self.steps),
            "config_text": _config_text(config) if config is not None else "",
            "autocompleted_fields": self.autocompleted_fields,
            "inputs": declared_io(config, "input") if config is not None else [],
            "outputs": declared_io(config, "output") if config is not None else [],
            "artifact": self.artifact,
            "steps": self.steps,
            "golden": self.golden_results,
            "gpu_check_pending": self.gpu_check_pending,
        }

    # ------------------------------------------------------------------ steps

    def _config(self) -> str:
        from repository.config import ConfigError, complete_config

        name = self.model_dir.name
        try:
            # NOTE: the devices are not known here: the stored config keeps what the user wrote
            # and each replica places it on its own devices (serving.core.placement).
            completed = complete_config(
                self.config_text, model_name=name, version_dir=self.version_dir, gpu_count=None
            )
        except ConfigError as error:
            raise StepFailed("; ".join(error.problems) or str(error)) from None
        config = completed.config
        self.autocompleted_fields = list(completed.autocompleted_fields)
        if config.backend == "python":
            from serving.backends.python import autocomplete
            from serving.backends.python.completion import completed_fields

            completed_python = autocomplete(config, self.version_dir)
            self.autocompleted_fields += completed_fields(config, completed_python)
            config = completed_python
        self.spec = ModelSpec(
            name=name,
            version=_version_number(self.version_dir),
            config=config,
            model_dir=self.model_dir,
            version_dir=self.version_dir,
        )
        filled = ", ".join(self.autocompleted_fields) or "nothing"
        return f"{config.platform or config.backend}; auto-complete filled {filled}"

    def _load(self) -> str:
        from serving.backends.registry import create_instances, load_instances
        from serving.check_placement import check_placement
        from serving.core.devices import detected_gpus

        spec = self._spec()
        if spec.config.platform == "ensemble":
            return "skipped:ensembles have no artifact to load"
        gpus = len(detected_gpus())
        placed = check_placement(spec.config, gpu_count=gpus)
        self.gpu_check_pending = placed.pending
        if placed.config is None:
            return f"skipped:GPU check pending: {placed.pending}"
        load_spec = dataclasses.replace(spec, config=placed.config)
        instances = create_instances(load_spec, cpu_count=os.cpu_count() or 1, gpu_count=gpus)
        # NOTE: one instance is enough to prove the artifact loads; the rest would only cost memory.
        load_instances(instances[:1])
        self.instance = instances[0]
        kind = type(self.instance).__name__
        loaded = f"loaded instance '{self.instance.placement.name}' ({kind})"
        if placed.pending:
            return f"{loaded} on the CPU runtime; GPU check pending: {placed.pending}"
        return loaded

    def _io(self) -> str:
        from serving.check_io import io_problems

        if self.instance is None:
            return "skipped:nothing loaded"
        artifact = self.instance.artifact_io()
        if artifact is None:
            return "skipped:this backend does not declare its inputs and outputs"
        inputs, outputs = artifact
        self.artifact = {
            "inputs": [dataclasses.asdict(t) for t in inputs],
            "outputs": [dataclasses.asdict(t) for t in outputs],
        }
        problems = io_problems(self.instance.spec.config, inputs, outputs)
        if problems:
            raise StepFailed("; ".join(problems))
        return f"{len(inputs)} inputs and {len(outputs)} outputs agree with the model"

    def _warmup(self) -> str:
        from serving.warmup import run_warmup

        if self.instance is None:
            return "skipped:nothing loaded"
        spec = self.instance.spec
        count = run_warmup(spec, [self.instance], strict_generated=True)
        what = "model_warmup entries" if spec.config.model_warmup else "a generated request"
        return f"{count} warm-up request(s) from {what}"

    def _golden(self) -> str:
        if not self.golden:
            return "skipped:no golden requests"
        if self.instance is None:
            return "skipped:nothing loaded"
        for entry in self.golden:
            self.golden_results.append(self._replay(entry))
        failed = [g for g in self.golden_results if not g["ok"]]
        if failed:
            raise StepFailed(
                f"{len(failed)} of {len(self.golden_results)} golden request(s) failed: "
                + "; ".join(f"{g['id']}: {g['message']}" for g in failed)
            )
        return f"{len(self.golden_results)} golden request(s) reproduced"

    def _replay(self, entry: dict[str, Any]) -> dict[str, Any]:
        from serving.check_io import replay_golden

        assert self.instance is not None
        return replay_golden(entry, spec=self._spec(), instance=self.instance)

    def _spec(self) -> ModelSpec:
        if self.spec is None:
            raise StepFailed("no config")
        return self.spec


def _version_number(version_dir: Path) -> int:
    try:
        return int(version_dir.name)
    except ValueError:
        return 1


def _config_text(config: model_config_pb2.ModelConfig) -> str:
    from repository.config import config_to_text

    return str(config_to_text(config))


def _read_golden(path: Path | None) -> list[dict[str, Any]] | None:
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("golden", data.get("requests", []))
    return [entry for entry in data if isinstance(entry, dict)]


def _emit(step: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(step) + "\n")
    sys.stdout.flush()


def _undumpable() -> None:
    """Processes the model starts run as the same user; a non-dumpable check keeps them out of
    its ``/proc`` entries (its report pipe, its memory) and from attaching to it."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_dumpable = 4
        ctypes.CDLL(None).prctl(pr_set_dumpable, 0, 0, 0, 0)


def run_check(
    *,
    model_dir: Path,
    version_dir: Path,
    config_file: Path | None,
    golden_file: Path | None,
    emit: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Check one version folder; ``config_file`` replaces the folder's config.pbtxt when given."""
    config_file = config_file or model_dir / "config.pbtxt"
    config_text = config_file.read_text(encoding="utf-8") if config_file.is_file() else None
    check = Check(
        model_dir=model_dir.resolve(),
        version_dir=version_dir.resolve(),
        config_text=config_text,
        golden=_read_golden(golden_file),
        emit=emit,
    )
    return check.run()


def _run_manifest(*, root: Path, manifest: dict[str, Path | None], emit: Any) -> dict[str, Any]:
    model_dir, version_dir = manifest["model_dir"], manifest["version_dir"]
    assert model_dir is not None and version_dir is not None
    return run_check(
        model_dir=model_dir,
        version_dir=version_dir,
        config_file=manifest["config"],
        golden_file=manifest["golden"],
        emit=emit,
    )


def _bundle_main(args: argparse.Namespace) -> int:
    from repository.config.bundle_unpack import private_stdout
    from serving.check_bundle import bundle_main, parse_rlimit

    if args.scratch is None:
        raise SystemExit("serving.check: --bundle-stdin needs --scratch")
    try:
        rlimits = [parse_rlimit(text) for text in args.rlimit]
    except ValueError as error:
        raise SystemExit(f"serving.check: {error}") from None
    return bundle_main(
        sys.stdin.buffer,
        private_stdout(),
        scratch=args.scratch,
        max_bytes=args.max_bundle_bytes,
        run_check=_run_manifest,
        rlimits=rlimits,
    )


def main(argv: list[str] | None = None) -> int:
    _undumpable()
    parser = argparse.ArgumentParser(prog="python -m serving.check", description=__doc__)
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--version-dir", type=Path)
    parser.add_argument("--config", type=Path, help="config.pbtxt to use instead of the folder's")
    parser.add_argument("--golden", type=Path, help="JSON list of golden requests")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--bundle-stdin", action="store_true", help="read a bundle from stdin")
    parser.add_argument("--scratch", type=Path, help="where --bundle-stdin unpacks the bundle")
    parser.add_argument("--max-bundle-bytes", type=int, default=DEFAULT_MAX_BUNDLE_BYTES)
    parser.add_argument(
        "--rlimit", action="append", default=[], help="NAME=VALUE applied after unpacking"
    )
    args = parser.parse_args(argv)
    if args.bundle_stdin:
        return _bundle_main(args)
    if args.model_dir is None or args.version_dir is None or args.report is None:
        parser.error("--model-dir, --version-dir and --report are required")
    report = run_check(
        model_dir=args.model_dir,
        version_dir=args.version_dir,
        config_file=args.config,
        golden_file=args.golden,
        emit=_emit,
    )
    args.report.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
