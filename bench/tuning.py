"""`python -m bench.tuning [--duration S]`: the tuner on the demo MLP, and the same sweep run with
perf_analyzer, written into docs/benchmarks.md.

First ``manage.py tune`` runs on a throwaway registry (the job the console runs, its table as it
prints it). Then, for every setting the tuner measured, one serving process with that config is
driven at each concurrency the tuner reached, by the tuner's own measurement and by perf_analyzer
back to back, so the two see the same server in the same minute; their throughput and p95 are set
side by side with the difference.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import django

from bench import perf_analyzer, report
from bench.server import serving

SLO_P95_MS = 50.0
RATE_PER_S = 200.0
INSTANCES = ("1", "2")
MAX_CONCURRENCY = "8"
ROUNDS = 3


def run_tuner(folder: Path, duration_s: float) -> tuple[str, Any]:
    """``manage.py tune`` on a fresh SQLite registry holding the demo MLP; its table and job."""
    os.environ["PORTICO_VAR_DIR"] = str(folder / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    django.setup()
    from django.core.management import call_command

    from repository.demo_models import write_onnx_mlp
    from repository.models import Tuning

    call_command("migrate", verbosity=0)
    write_onnx_mlp(folder / "models", "mlp", max_batch_size=64)
    call_command("import_repository", str(folder / "models"), sync=True, stdout=io.StringIO())
    out = io.StringIO()
    call_command("tune", "mlp", "1", "--slo-p95-ms", str(SLO_P95_MS), "--rate", str(RATE_PER_S),
                 "--duration", str(duration_s), "--instances", *INSTANCES,
                 "--max-concurrency", MAX_CONCURRENCY,
                 stdout=out, stderr=io.StringIO())  # fmt: skip
    return out.getvalue(), Tuning.objects.latest("pk")


def agreement(job: Any, folder: Path, duration_s: float) -> list[list[str]]:
    """Per setting and concurrency: the tuner's measure and perf_analyzer on one server."""
    from repository.tuning.inputs import request_bodies
    from repository.tuning.launcher import PrivateServer
    from repository.tuning.loadgen import Shape, Target
    from repository.tuning.measure import measure
    from repository.tuning.sweep import Setting, tuned_config_text

    config = job.version.config_text
    bodies, _ = request_bodies(config_text=config, candidates=[])
    rows = []
    for result in job.results:
        setting = Setting.from_dict(result["setting"])
        repo = folder / "agreement"
        (repo / "mlp" / "1").mkdir(parents=True, exist_ok=True)
        (repo / "mlp" / "1" / "model.onnx").write_bytes(
            (folder / "models" / "mlp" / "1" / "model.onnx").read_bytes()
        )
        (repo / "mlp" / "config.pbtxt").write_text(tuned_config_text(config, setting))
        with serving(repo) as addresses:
            url = f"http://{addresses['http']}"
            server = PrivateServer(url=url, pid=_pid_on(addresses["http"]))
            target = Target(url=url, path="/v2/models/mlp/versions/1/infer", bodies=bodies)
            for point in result["curve"]:
                level = int(point["concurrency"])
                shape = Shape(mode="concurrency", duration_s=duration_s, concurrency=level)
                ours, theirs = [], []
                # Alternating rounds: on a shared machine the load changes from minute to minute,
                # and whichever runs second would otherwise always meet a warmer server.
                for _ in range(ROUNDS):
                    ours.append(measure(server, target, shape, model="mlp", version=1,
                                        stop=threading.Event()))  # fmt: skip
                    theirs.append(perf_analyzer.run_load(
                        model="mlp", protocol="http", url=addresses["http"], concurrency=level,
                        shape="INPUT0:256", measurement_ms=int(duration_s * 1000),
                    ))  # fmt: skip
                rows.append(_row(setting.label, level, ours, theirs))
    return rows


def _row(label: str, level: int, ours: list[Any], theirs: list[Any]) -> list[str]:
    our_rate = statistics.median(r.throughput_per_s for r in ours)
    their_rate = statistics.median(r.throughput_per_s for r in theirs)
    our_p95 = statistics.median(r.p95_ms for r in ours)
    their_p95 = statistics.median(r.p95_us / 1000 for r in theirs)
    unstable = "" if all(r.stable for r in theirs) else " †"
    return [
        label, str(level), f"{our_rate:.0f}", f"{their_rate:.0f}{unstable}",
        _diff(our_rate, their_rate), f"{our_p95:.2f}", f"{their_p95:.2f}",
        _diff(our_p95, their_p95),
    ]  # fmt: skip


def _diff(ours: float, theirs: float) -> str:
    return f"{100 * (ours - theirs) / theirs:+.0f} %" if theirs else "–"


def _pid_on(address: str) -> int:
    """The serving process listening on ``address`` (for the CPU column of the measurement)."""
    import psutil

    port = int(address.rsplit(":", 1)[1])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == "LISTEN" and conn.pid:
            return int(conn.pid)
    return os.getpid()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tuning", description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="portico-bench-tuning-") as name:
        folder = Path(name)
        table, job = run_tuner(folder, options.duration)
        print(table)
        rows = agreement(job, folder, options.duration)
    body = "\n\n".join([
        "### The tuner on the demo MLP, and the same sweep with perf_analyzer",
        report.machine_line(),
        f"`python manage.py tune mlp 1 --slo-p95-ms {SLO_P95_MS:g} --rate {RATE_PER_S:g} "
        f"--duration {options.duration:g} --instances {' '.join(INSTANCES)} "
        f"--max-concurrency {MAX_CONCURRENCY}` printed:",
        f"```\n{table}\n```",
        "Each setting again, one serving process per setting, at every concurrency the tuner "
        "reached: the tuner's measurement (aiohttp, closed loop) and perf_analyzer (HTTP) on the "
        f"same server in {ROUNDS} alternating rounds, medians shown; † marks a point where "
        "perf_analyzer found no stable window. Difference = tuner vs perf_analyzer.",
        report.table(["setting", "concurrency", "tuner req/s", "perf_analyzer req/s", "diff",
                      "tuner p95 ms", "perf_analyzer p95 ms", "diff"], rows),
        f"Reproduce: `PERF_ANALYZER=../shared/tools/perf-analyzer python -m bench.tuning "
        f"--duration {options.duration:g}`",
    ])  # fmt: skip
    report.write_section("tuning", body)
    print(f"wrote {report.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
