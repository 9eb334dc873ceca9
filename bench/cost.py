"""Server CPU per request and the batches it formed: this tree beside another, alternating.

`python -m bench cost [--baseline DIR] [--rounds N] [--parameter KEY=VALUE] [--grpc-workers 1,2]
[--http-workers 1,2] [--grpc-transport h2]` serves the MLP 256→1024→1024→16 and the
identity model (dynamic batching, max batch 32, delay 0, as the peers comparison configures them)
from this tree and, when given, from a second tree (e.g. `git worktree add ../before main`), and
drives each at concurrency 32 over HTTP and gRPC. Beside them it drives the transport floor
(`bench/transport_floor.py`: an echo model on the same uvicorn and grpc.aio stacks).

For each point it reports the server's CPU per request (its process tree's CPU time over the run
divided by the requests its statistics counted, so perf_analyzer's warm-up and retries are counted
too), the mean batch (inferences ÷ executions), and then one client's p50 (what spending CPU on
a quick answer buys). CPU per request is the figure that holds on a machine shared with other
work: a busy neighbour stretches latency and cuts throughput, but the CPU each request costs
moves much less. Rounds alternate the trees so that drift hits both.
``--grpc-workers 1,2`` adds this tree served with that many gRPC front-end processes (gRPC only),
``--http-workers 1,2`` the same for HTTP (HTTP only); the process tree's CPU includes the
front-ends. ``--grpc-transport h2`` (repeatable) adds this tree with its gRPC port on that
transport (gRPC only; h2corn is the default). ``--parameter KEY=VALUE`` (repeatable) adds this
tree serving models whose configs carry that backend parameter, e.g. ``allow_spinning=false``,
alone and with each front-end flag.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson

from bench import perf_analyzer, report
from bench.server import ROOT, serving, transport_floor

CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [{dims}] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [{out}] }}]
instance_group [{{ kind: KIND_CPU count: 1 }}]
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
"""
MODELS = {"mlp": (256, 16), "identity": (16, 16)}
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its descendants (reaped children included)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        fields = _stat(current)
        if fields is not None:
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        todo.extend(parents.get(current, []))
    return total / TICK


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def counts(http: str, model: str, headers: dict[str, str] | None = None) -> tuple[int, int]:
    """(inferences, executions) so far, from the statistics extension."""
    url = f"http://{http}/v2/models/{model}/stats"
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as reply:
        stats = orjson.loads(reply.read())["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def write_models(repo: Path, parameter: str = "") -> None:
    """The two models; ``parameter`` ("KEY=VALUE"), when given, is added to both configs."""
    from bench.__main__ import _demo_models

    demo_models = _demo_models()
    demo_models.write_onnx_mlp(repo, name="mlp", max_batch_size=32)
    demo_models.write_onnx_identity(repo, name="identity", dtype="FP32", max_batch_size=32)
    for name, (dims, out) in MODELS.items():
        text = CONFIG.format(name=name, dims=dims, out=out)
        if parameter:
            key, value = parameter.split("=", 1)
            text += f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        (repo / name / "config.pbtxt").write_text(text)


# Serve flags that put one protocol on another path: a label with one is measured on it alone.
WORKERS_FLAGS = {"--grpc-workers": "grpc", "--http-workers": "http", "--grpc-transport": "grpc"}


def _only_protocol(label: str) -> str | None:
    """The one protocol a label's front-end flag serves through (None: both)."""
    return next((WORKERS_FLAGS[word] for word in label.split() if word in WORKERS_FLAGS), None)


@contextlib.contextmanager
def _target(label: str, repo: Path, baseline: Path | None) -> Iterator[dict[str, str]]:
    words = label.split()
    if words and "=" in words[0]:  # this tree, its models with one more parameter (and flags)
        with tempfile.TemporaryDirectory() as folder:
            write_models(Path(folder), parameter=words[0])
            with serving(Path(folder), extra_args=tuple(words[1:])) as found:
                yield found
    elif label == "floor":
        with transport_floor() as addresses:
            yield addresses
    elif _only_protocol(label):  # this tree, through front-end processes
        with serving(repo, extra_args=tuple(words)) as found:
            yield found
    else:
        with serving(repo, root=baseline if label == "baseline" and baseline else ROOT) as found:
            yield found


def measure(addresses: dict[str, str], model: str, protocol: str, seconds: int) -> dict[str, float]:
    """CPU per request, mean batch and throughput at concurrency 32, then a lone client's p50."""
    found = _saturated(addresses, model, protocol, seconds)
    alone = _load(addresses, model, protocol, seconds, concurrency=1)
    return {**found, "p50_c1_us": alone.p50_us}


def _load(
    addresses: dict[str, str], model: str, protocol: str, seconds: int, *, concurrency: int
) -> perf_analyzer.LoadResult:
    floor = "metrics" not in addresses  # the floor serves only its echo "identity"
    return perf_analyzer.run_load(
        model="identity" if floor else model,
        protocol=protocol,
        url=addresses[protocol],
        concurrency=concurrency,
        shape=f"INPUT0:{MODELS['identity' if floor else model][0]}",
        measurement_ms=seconds * 1000,
        any_spread=True,
    )


def _saturated(
    addresses: dict[str, str], model: str, protocol: str, seconds: int
) -> dict[str, float]:
    pid = int(addresses["pid"])
    floor = "metrics" not in addresses  # the floor serves no statistics
    before = (0, 0) if floor else counts(addresses["http"], model)
    cpu, began = tree_cpu_s(pid), time.monotonic()
    result = _load(addresses, model, protocol, seconds, concurrency=32)
    used, wall = tree_cpu_s(pid) - cpu, time.monotonic() - began
    if floor:  # no request count: cores over the run ÷ the measured throughput
        return {
            "cpu_us": used / wall / result.throughput_per_s * 1e6,
            "batch": 1.0,
            "throughput": result.throughput_per_s,
        }
    after = counts(addresses["http"], model)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    return {
        "cpu_us": used / max(1, inferences) * 1e6,
        "batch": inferences / max(1, executions),
        "throughput": result.throughput_per_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench cost")
    parser.add_argument("--baseline", type=Path, help="another tree to measure beside this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument(
        "--grpc-workers", type=lambda text: [int(n) for n in text.split(",") if n], default=[],
        help="also serve this tree with --grpc-workers N for each N (comma-separated, gRPC only)",
    )  # fmt: skip
    parser.add_argument(
        "--http-workers", type=lambda text: [int(n) for n in text.split(",") if n], default=[],
        help="also serve this tree with --http-workers N for each N (comma-separated, HTTP only)",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-transport", action="append", default=[], choices=("h2", "grpcio", "h2corn"),
        help="also serve this tree's gRPC port on this transport (repeatable, gRPC only)",
    )  # fmt: skip
    parser.add_argument(
        "--parameter", action="append", default=[], metavar="KEY=VALUE",
        help="also serve this tree with this config parameter on both models (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if bad := [p for p in args.parameter if "=" not in p.strip("=")]:
        parser.error(f"--parameter takes KEY=VALUE, got {bad[0]!r}")
    workers = [
        *(f"--grpc-workers {n}" for n in args.grpc_workers if n > 0),
        *(f"--http-workers {n}" for n in args.http_workers if n > 0),
        *(f"--grpc-transport {name}" for name in args.grpc_transport),
    ]
    labels = [
        "this tree", *(["baseline"] if args.baseline else []), *args.parameter, *workers,
        *(f"{parameter} {flag}" for parameter in args.parameter for flag in workers), "floor",
    ]  # fmt: skip
    points = [
        (label, model, protocol)
        for label in labels
        for model in MODELS
        for protocol in ("http", "grpc")
        if (label != "floor" or model == "identity") and _only_protocol(label) in (None, protocol)
    ]
    found: dict[tuple[str, str, str], list[dict[str, float]]] = {p: [] for p in points}
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        write_models(repo)
        for index in range(args.rounds):
            order = labels if index % 2 == 0 else list(reversed(labels))
            loads.append(f"{os.getloadavg()[0]:.1f}")
            for label in order:
                with _target(label, repo, args.baseline) as addresses:
                    for point in [p for p in points if p[0] == label]:
                        found[point].append(measure(addresses, point[1], point[2], args.seconds))
    rows = []
    for (label, model, protocol), results in found.items():
        rows.append(
            [
                label,
                "echo (floor)" if label == "floor" else model,
                protocol.upper(),
                f"{statistics.median(r['cpu_us'] for r in results):.0f}",
                f"{statistics.median(r['batch'] for r in results):.1f}",
                f"{statistics.median(r['throughput'] for r in results):.0f}",
                f"{statistics.median(r['p50_c1_us'] for r in results):.0f}",
                " / ".join(f"{r['cpu_us']:.0f}" for r in results),
            ]
        )
    body = "\n\n".join(
        [
            "### Server CPU per request at concurrency 32, and a lone client's p50 "
            "(dynamic batching, max 32, delay 0)",
            report.machine_line(),
            report.table(
                [
                    "tree",
                    "model",
                    "protocol",
                    "CPU µs per request",
                    "mean batch",
                    "infer/s",
                    "p50 µs at concurrency 1",
                    "CPU µs per request, each round",
                ],
                rows,
            ),
            f"Median of {args.rounds} alternating round(s); 1-minute load average at each round's "
            f"start: {', '.join(loads)}. The floor has no statistics: its CPU per request is its "
            "cores over the run ÷ perf_analyzer's throughput.",
            "Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench cost "
            "[--baseline ../before] [--parameter KEY=VALUE] [--grpc-workers 1,2] "
            "[--http-workers 1,2] [--grpc-transport h2]`",
        ]
    )
    report.write_section("cost", body)
    print(body)
