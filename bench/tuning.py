"""`python -m bench.tuning [--duration S]`: the tuner on the demo MLP, and the same sweep run with
perf_analyzer, written into docs/benchmarks.md.

First ``manage.py tune`` runs on a throwaway registry (the job the console runs, its table as it
prints it), with perf_analyzer as its load generator. Then, for every setting the tuner measured,
one serving process with that config is driven at each concurrency the tuner reached, by the
tuner's own measurement, by perf_analyzer run by hand and by the built-in Python client, in turn,
so all three see the same server in the same minute; the tuner and the hand run are set side by
side with the difference, the built-in client beside them.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
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
ROUNDS = 2


def run_tuner(folder: Path, duration_s: float) -> tuple[str, Any]:
    """``manage.py tune`` on a fresh SQLite registry holding the demo MLP; its table and job."""
    os.environ["PORTICO_VAR_DIR"] = str(folder / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    os.environ["PORTICO_PERF_ANALYZER"] = perf_analyzer.find_perf_analyzer()
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
    """Per setting and concurrency: the tuner's measure, perf_analyzer by hand and the built-in
    client on one server."""
    from repository.tuning.inputs import request_bodies
    from repository.tuning.launcher import PrivateServer
    from repository.tuning.loadgen import Shape, Target
    from repository.tuning.loadgen_perf_analyzer import PerfAnalyzer
    from repository.tuning.measure import measure
    from repository.tuning.sweep import Setting, tuned_config_text

    config = job.version.config_text
    bodies, _ = request_bodies(config_text=config, candidates=[])
    generator = PerfAnalyzer.prepare(
        perf_analyzer.find_perf_analyzer(), bodies, batched=True, folder=folder
    )
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
                runs: dict[str, list[Any]] = {"tuner": [], "hand": [], "built-in": []}

                def tuner() -> Any:
                    return measure(server, target, shape, model="mlp", version=1,  # noqa: B023
                                   stop=threading.Event(), perf_analyzer=generator)  # fmt: skip

                def hand() -> Any:
                    return perf_analyzer.run_load(
                        model="mlp", protocol="http", url=addresses["http"],  # noqa: B023
                        concurrency=level, shape="INPUT0:256",  # noqa: B023
                        measurement_ms=int(duration_s * 1000), any_spread=True,
                    )  # fmt: skip

                def built_in() -> Any:
                    return measure(server, target, shape, model="mlp", version=1,  # noqa: B023
                                   stop=threading.Event())  # fmt: skip

                order = [("tuner", tuner), ("hand", hand), ("built-in", built_in)]
                # Alternating rounds: on a shared machine the load changes from minute to minute,
                # and whichever runs last would otherwise always meet a warmer server.
                for round_ in range(ROUNDS):
                    for name, run in order if round_ % 2 == 0 else reversed(order):
                        try:
                            runs[name].append(run())
                        except RuntimeError as exc:  # one failed point must not lose the rest
                            print(f"{setting.label} c{level} {name}: {exc}", file=sys.stderr)
                rows.append(_row(setting.label, level, runs))
    return rows


def summary(rows: list[list[str]]) -> str:
    """The median size of each difference over all points (a sign-free spread of agreement)."""

    def median_of(column: int) -> str:
        found = [abs(float(re.sub(r"[^0-9.+-]", "", r[column].split("(")[-1]))) for r in rows
                 if "%" in r[column]]  # fmt: skip
        return f"{statistics.median(found):.0f} %" if found else "–"

    within = sum(1 for r in rows if "%" in r[4] and abs(float(r[4].split()[0])) <= 15)
    return (
        f"Median size of the difference, over the {len(rows)} points: tuner vs perf_analyzer by "
        f"hand {median_of(4)} in throughput and {median_of(7)} in p95 ({within} of {len(rows)} "
        f"points within 15 % in throughput); built-in client vs perf_analyzer by hand "
        f"{median_of(8)} in throughput and {median_of(9)} in p95."
    )


def _row(label: str, level: int, runs: dict[str, list[Any]]) -> list[str]:
    our_rate = _median(r.throughput_per_s for r in runs["tuner"])
    their_rate = _median(r.throughput_per_s for r in runs["hand"])
    our_p95 = _median(r.p95_ms for r in runs["tuner"])
    their_p95 = _median(r.p95_us / 1000 for r in runs["hand"])
    client_rate = _median(r.throughput_per_s for r in runs["built-in"])
    client_p95 = _median(r.p95_ms for r in runs["built-in"])
    return [
        label, str(level), f"{our_rate:.0f}", f"{their_rate:.0f}",
        _diff(our_rate, their_rate), f"{our_p95:.2f}", f"{their_p95:.2f}",
        _diff(our_p95, their_p95), f"{client_rate:.0f} ({_diff(client_rate, their_rate)})",
        f"{client_p95:.2f} ({_diff(client_p95, their_p95)})",
    ]  # fmt: skip


def _median(values: Any) -> float:
    """The median, or NaN (shown as "nan") where every round of that generator failed."""
    found = list(values)
    return statistics.median(found) if found else float("nan")


def _diff(ours: float, theirs: float) -> str:
    if not theirs or math.isnan(theirs) or math.isnan(ours):
        return "–"
    return f"{100 * (ours - theirs) / theirs:+.0f} %"


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
        "The tuner's load generator here is perf_analyzer (`PORTICO_PERF_ANALYZER`; the "
        "built-in Python client is used only where none is installed). Each setting again, one "
        "serving process per setting, at every concurrency the tuner reached: the tuner's "
        "measurement (perf_analyzer over HTTP with the version's inputs, the duration split in "
        f"three {options.duration / 3:.2g} s windows), perf_analyzer run by hand (HTTP, random "
        f"data, three {options.duration:g} s windows, any spread accepted) and the built-in "
        f"client (aiohttp, closed loop), on the same server in {ROUNDS} rounds whose order "
        "alternates, medians shown. Difference = tuner vs perf_analyzer by hand; the built-in "
        "client's difference from the hand run is in brackets. Load average (1, 5, 15 min) at "
        f"the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; on a machine shared with "
        "other work single points swing from minute to minute.",
        report.table(["setting", "concurrency", "tuner req/s", "perf_analyzer req/s", "diff",
                      "tuner p95 ms", "perf_analyzer p95 ms", "diff", "built-in req/s",
                      "built-in p95 ms"], rows),
        summary(rows),
        f"Reproduce: `PERF_ANALYZER=../shared/tools/perf-analyzer python -m bench.tuning "
        f"--duration {options.duration:g}`",
    ])  # fmt: skip
    report.write_section("tuning", body)
    print(f"wrote {report.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
