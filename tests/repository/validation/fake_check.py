"""A scripted stand-in for ``python -m serving.check`` (same CLI and report), driven by the
``FAKE_CHECK`` environment variable: ``ok``, ``fail-io``, ``crash``, ``golden-mismatch``,
``golden-peek`` (echoes the expected outputs it is given), ``slow``, ``stream`` (steps a while
apart and a stray print), ``sleeper`` (leaves a process behind), ``allocate`` (1 GiB at once),
``killed`` (SIGKILLs itself), ``env`` (reports its environment) and ``forks`` (starts as many
processes as it can, up to 64, and reports how many it got).
``FAKE_CHECK_CONFIG``, when set, is the effective config it claims."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--model-dir", "--version-dir", "--config", "--golden", "--report"):
        parser.add_argument(flag)
    args = parser.parse_args()
    mode = os.environ.get("FAKE_CHECK", "ok")
    if mode == "slow":
        import time

        time.sleep(float(os.environ.get("FAKE_CHECK_SLEEP_S", "30")))
    if mode == "crash":
        print("Traceback: boom", file=sys.stderr)
        return 3
    if mode in SCRIPTED:
        return SCRIPTED[mode](args)
    files = sorted(p.name for p in Path(args.version_dir).iterdir())
    steps = [_step("load", "passed", f"files: {', '.join(files)}")]
    if mode == "fail-io":
        steps.append(_step("io", "failed", "input 'INPUT0': config says FP32, model has INT32"))
    else:
        steps.append(_step("io", "passed", ""))
    golden = []
    if args.golden:
        for g in json.loads(Path(args.golden).read_text()):
            ok = mode != "golden-mismatch"
            msg = "" if ok else f"golden request '{g['name']}': output 'OUTPUT0' differs"
            outputs = {"OUTPUT0": {"datatype": "FP32", "shape": [1], "data": [1.0]}}
            if mode == "golden-peek" and g.get("outputs"):
                outputs = g["outputs"]  # a model that answers what it is told is expected
            golden.append({"id": g["id"], "ok": ok, "message": msg, "outputs": outputs})
        steps.append(
            _step(
                "golden",
                "passed" if mode != "golden-mismatch" else "failed",
                golden[0]["message"] if golden else "",
            )
        )
    config = Path(args.config).read_text() if args.config else ""
    config = config if "backend" in config else config + 'backend: "onnxruntime"\n'
    config = config if "name:" in config else f'name: "{Path(args.model_dir).name}"\n' + config
    report = {
        "ok": all(s["status"] != "failed" for s in steps),
        "config_text": os.environ.get("FAKE_CHECK_CONFIG", config),
        "autocompleted_fields": ["backend"],
        "inputs": [],
        "outputs": [],
        "steps": steps,
        "golden": golden,
    }
    Path(args.report).write_text(json.dumps(report))
    return 0


def _stream(args: argparse.Namespace) -> int:
    import time

    for name, then_s in (("load", 1.0), ("io", 0.1)):  # a second between the two steps
        _step(name, "passed", "")
        time.sleep(then_s)
    print("a stray print from model code", flush=True)
    Path(args.report).write_text(json.dumps({"ok": True, "config_text": "x"}))
    return 0


def _sleeper(args: argparse.Namespace) -> int:
    import subprocess
    import time

    marker = os.environ.get("FAKE_CHECK_SLEEP_S", "60")
    sleep = "import time, sys; time.sleep(float(sys.argv[1]))"
    subprocess.Popen([sys.executable, "-c", sleep, marker], start_new_session=True)
    time.sleep(60)
    return 0


def _allocate(args: argparse.Namespace) -> int:
    data = bytearray(1024 * 1024 * 1024)
    print("allocated", len(data))
    return 0


def _killed(args: argparse.Namespace) -> int:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def _env(args: argparse.Namespace) -> int:
    Path(args.report).write_text(json.dumps({"ok": True, "env": dict(os.environ)}))
    return 0


def _forks(args: argparse.Namespace) -> int:
    import time

    started = 0
    for _ in range(64):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
    Path(args.report).write_text(json.dumps({"ok": True, "forked": started}))
    return 0


SCRIPTED = {
    "forks": _forks,
    "stream": _stream,
    "sleeper": _sleeper,
    "allocate": _allocate,
    "killed": _killed,
    "env": _env,
}


def _step(name: str, status: str, message: str) -> dict[str, object]:
    step = {"name": name, "status": status, "message": message, "duration_ms": 1.0}
    print(json.dumps(step), flush=True)
    return step


if __name__ == "__main__":
    sys.exit(main())
