"""`python -m bench.scaling [--workers 1,2,4,8] [--seconds S]`: throughput as front-end processes
are added, for a many-core host (the issue's target: at least 0.7 × N of one worker's).

For each N, one serving process with ``--workers N`` (N HTTP and N gRPC front-ends, one
scheduling process, so one dynamic batcher per model) serves the identity and the MLP models as
``bench cost`` configures them, and perf_analyzer drives each over HTTP and gRPC at concurrency
32 × N. Each row has the throughput, its ratio to N = 1, the mean batch (which must not shrink
as processes are added) and the server's CPU per request (every process of its tree). It takes
about ``len(workers) × 4 × (seconds × 3 + 5)`` seconds (under 5 minutes at the defaults), so it
fits one prepared run on a lent machine; on a 2-core machine the figures show only that it runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench import perf_analyzer, report
from bench.cost import MODELS, counts, tree_cpu_s, write_models
from bench.server import serving

PROTOCOLS = ("http", "grpc")
CONCURRENCY_PER_WORKER = 32
Points = dict[tuple[str, str, int], dict[str, float]]  # (model, protocol, workers) → figures


def measure(addresses: dict[str, str], model: str, protocol: str, *, workers: int,
            seconds: int) -> dict[str, float]:  # fmt: skip
    pid = int(addresses["pid"])
    before = counts(addresses["http"], model)
    cpu = tree_cpu_s(pid)
    result = perf_analyzer.run_load(
        model=model, protocol=protocol, url=addresses[protocol],
        concurrency=CONCURRENCY_PER_WORKER * workers, shape=f"INPUT0:{MODELS[model][0]}",
        measurement_ms=seconds * 1000, any_spread=True,
    )  # fmt: skip
    used = tree_cpu_s(pid) - cpu
    after = counts(addresses["http"], model)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    return {
        "throughput": result.throughput_per_s,
        "batch": inferences / max(1, executions),
        "cpu_us": used / max(1, inferences) * 1e6,
        "stable": float(result.stable),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--workers", default="1,2,4,8", help="front-end counts, comma-separated")
    parser.add_argument("--seconds", type=int, default=3, help="perf_analyzer's window")
    parser.add_argument(
        "--backend-config", action="append", default=[], metavar="BACKEND,SETTING=VALUE",
        help="passed to the server (repeatable): e.g. onnxruntime,allow_spinning=false, whose "
             "spinning pool threads take the cores the front-ends need",
    )  # fmt: skip
    args = parser.parse_args(argv)
    counts_wanted = [int(n) for n in args.workers.split(",") if n]
    found: Points = {}
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        write_models(repo)
        for workers in counts_wanted:
            with serving(repo, extra_args=server_args(workers, args.backend_config)) as addresses:
                for model in MODELS:
                    for protocol in PROTOCOLS:
                        found[(model, protocol, workers)] = measure(
                            addresses, model, protocol, workers=workers, seconds=args.seconds
                        )
    report.write_section("scaling", _body(found, counts_wanted, args))
    print(_body(found, counts_wanted, args))


def server_args(workers: int, backend_config: list[str]) -> tuple[str, ...]:
    flags = ["--workers", str(workers)]
    for entry in backend_config:
        flags += ["--backend-config", entry]
    return tuple(flags)


def _body(
    found: dict[tuple[str, str, int], dict[str, float]],
    workers: list[int],
    args: argparse.Namespace,
) -> str:
    rows = []
    for model in MODELS:
        for protocol in PROTOCOLS:
            one = found.get((model, protocol, workers[0]), {}).get("throughput") or 1.0
            for n in workers:
                point = found[(model, protocol, n)]
                rows.append([
                    model, protocol.upper(), str(n), str(CONCURRENCY_PER_WORKER * n),
                    f"{point['throughput']:,.0f}{'' if point['stable'] else ' †'}",
                    f"{point['throughput'] / one:.2f}", f"{0.7 * n / workers[0]:.1f}",
                    f"{point['batch']:.1f}", f"{point['cpu_us']:.0f}",
                ])  # fmt: skip
    return "\n\n".join([
        "### Scaling with front-end processes (`serve --workers N`)",
        report.machine_line() + f" ({os.cpu_count()} cores seen)",
        report.table(
            ["model", "protocol", "workers", "concurrency", "infer/s", f"÷ N={workers[0]}",
             "target ≥", "mean batch", "server CPU µs per request"],
            rows,
        ),
        "One scheduling process (one dynamic batcher per model) behind N HTTP and N gRPC "
        "front-ends; perf_analyzer at concurrency 32 × N. † perf_analyzer's windows did not agree "
        "within 15 %.",
        f"Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench.scaling --workers "
        f"{args.workers} --seconds {args.seconds}"
        + "".join(f" --backend-config {entry}" for entry in args.backend_config) + "`",
    ])  # fmt: skip


if __name__ == "__main__":
    main()
