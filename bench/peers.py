"""Portico beside MLServer and PyTriton (Triton's C++ core), side by side in one run.

`python -m bench peers [--rounds N]` calls the shared peers harness (`../shared/peers/run.sh` from
the project root, or ``PEERS_DIR``): the same MLP 256→1024→1024→16 and identity ONNX models, each
server with dynamic batching at max batch 32 and 0 delay, driven by the same perf_analyzer with
batch-1 requests. Each round runs every server once, in the opposite order from the round before,
so a noisy spell on the shared machine falls on all of them; the table keeps each point's median
over the rounds and rewrites its section of docs/benchmarks.md.

Each protocol is measured on its own freshly started server, gRPC first in one round and HTTP first
in the next. On one server one after the other, the second protocol would always meet a warm
process and the first never would, a bias in the gRPC ÷ HTTP ratio the issue sets a target for
(the first such run, on 2026-12-05, found the rounds' spread larger than any such bias:
docs/benchmarks.md). That ratio is also given per round (the two protocols measured minutes
apart, under the same spell of the shared machine), so its spread shows beside its median.

``--grpc-workers N`` and ``--grpc-transport h2`` (the listener before h2corn became the default)
each add a row: Portico's gRPC measured once more, served that way.

Server CPU per request is the server's whole process tree's CPU time over the run divided by the
requests it answered (cores ÷ throughput), the figure the issue's targets are set in.

Served ÷ raw ONNX Runtime at batch 1 divides Portico's MLP throughput over HTTP by the harness's
own calibration, raw ONNX Runtime running the same MLP in-process at batch 1 on one thread, timed
just before and just after that server in the same call, so both come from the same spell of the
machine (these machines differ two- or threefold in batch-1 speed from one day to the next).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import report

ROOT = Path(__file__).resolve().parent.parent
PORTICO, PYTRITON, MLSERVER = "portico-dyn32-0ms", "pytriton-dyn32-0ms", "mlserver-batch32"
# MLServer's REST API has no binary-tensor extension, so its HTTP row is JSON both ways.
GROUPS = (
    (f"{PORTICO},{PYTRITON}", "grpc,http-bin"),
    (MLSERVER, "grpc,http-json"),
)
LABELS = {
    PORTICO: "Portico",
    PYTRITON: "PyTriton 0.7.0 (Triton's C++ core)",
    MLSERVER: "MLServer 1.7.1",
}
Point = dict[str, Any]


def peers_dir() -> Path:
    return Path(os.environ.get("PEERS_DIR", ROOT.parent / "shared" / "peers"))


# The points: MLP throughput at concurrency 32, identity latency at concurrency 1.
POINTS = (("mlp", "32"), ("identity", "1"))


@dataclasses.dataclass(frozen=True)
class GrpcVariant:
    """Portico's gRPC served another way, measured right after Portico's own row: its row's
    name, its label, and the serving settings (environment) that make it."""

    server: str
    label: str
    env: dict[str, str]


def frontend_variant(grpc_workers: int) -> GrpcVariant:
    """Portico's gRPC through ``grpc_workers`` front-end processes."""
    return GrpcVariant(f"portico-grpc-workers-{grpc_workers}",
                       f"Portico, {grpc_workers} gRPC front-end(s)",
                       {"SERVING_GRPC_WORKERS": str(grpc_workers)})  # fmt: skip


def transport_variant(transport: str) -> GrpcVariant:
    """Portico's gRPC port on another ``--grpc-transport``."""
    return GrpcVariant(f"portico-grpc-{transport}", f"Portico, gRPC on {transport}",
                       {"SERVING_GRPC_TRANSPORT": transport})  # fmt: skip


def run_round(
    work: Path,
    *,
    reverse: bool,
    window_ms: int,
    variants: tuple[GrpcVariant, ...] = (),
    index: int = 0,
) -> list[Point]:
    """Every server once per point and protocol, each protocol on a fresh server; what each
    measured, tagged with the round's ``index``. Each of ``variants`` measures Portico's gRPC
    once more right after Portico's own rows."""
    points: list[Point] = []
    groups = list(reversed(GROUPS)) if reverse else list(GROUPS)
    for servers, protocols in groups:
        order = protocols.split(",")
        for model, concurrency in POINTS:
            for protocol in reversed(order) if reverse else order:
                points.extend(_run(work, servers, protocol, model, concurrency, window_ms, reverse))
            if PORTICO not in servers.split(","):
                continue
            for variant in variants:
                # NOTE: the serving process reads its SERVING_* settings; the harness passes its
                # environment on to the servers it starts.
                for point in _run(work, PORTICO, "grpc", model, concurrency, window_ms,
                                  reverse, variant.env):  # fmt: skip
                    points.append({**point, "server": variant.server})
    return [{**point, "round": index} for point in points]


def _run(
    work: Path,
    servers: str,
    protocols: str,
    model: str,
    concurrency: str,
    window_ms: int,
    reverse: bool,
    extra_env: dict[str, str] | None = None,
) -> list[Point]:
    """One call of the shared harness: ``servers`` on one model at one concurrency."""
    out = work / "results" / "servers.json"
    out.unlink(missing_ok=True)
    command = [
                str(peers_dir() / "run.sh"),
        "--only", servers, "--protos", protocols, "--models", model, "--conc", concurrency,
        "--window-ms", str(window_ms),
    ]  # fmt: skip
    if reverse:
        command.append("--reverse")
    env = {**os.environ, "PEERS_HOME": str(work), **(extra_env or {})}
    calibrations = work / "results" / "calib.jsonl"
    seen = len(_lines(calibrations))
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    points: list[Point] = json.loads(out.read_text())
    raw = _raw_calls_per_s(_lines(calibrations)[seen:])
    return [{**point, "raw_ort_b1_per_s": raw} if raw else point for point in points]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _raw_calls_per_s(records: list[str]) -> float | None:
    """The median of the calibrations the harness ran around the servers of one call (raw ONNX
    Runtime, the MLP at batch 1, one thread)."""
    values = [json.loads(line)["mlp_b1_intra1_calls_per_s"] for line in records if line.strip()]
    return statistics.median(values) if values else None


def _load() -> str:
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def _measured(
    points: list[Point], server: str, model: str, protocol: str, conc: int
) -> list[Point]:
    """The points that measured ``server`` on ``model`` over ``protocol`` at ``conc``."""
    return [
        p
        for p in points
        if (p["server"], p["model"], p["concurrency"]) == (server, model, conc)
        and p["proto"].startswith(protocol)
        and p.get("ok")
    ]


def _median(
    points: list[Point], server: str, model: str, protocol: str, conc: int, key: str
) -> float | None:
    values = [p[key] for p in _measured(points, server, model, protocol, conc) if key in p]
    return statistics.median(values) if values else None


def _cell(
    points: list[Point], server: str, model: str, protocol: str, conc: int, key: str, unit: str
) -> str:
    """The median, marked † when a round measured it only at any spread (a busy machine)."""
    value = _median(points, server, model, protocol, conc, key)
    unstable = any(
        p.get("unstable_at_15pct") for p in _measured(points, server, model, protocol, conc)
    )
    return _fmt(value, unit) + (" †" if unstable and value is not None else "")


def _cpu_per_request_us(points: list[Point], server: str, protocol: str) -> float | None:
    values = [
        p["server_cpu_cores"] / p["infer_per_s"] * 1e6
        for p in _measured(points, server, "mlp", protocol, 32)
        if p.get("infer_per_s")
    ]
    return statistics.median(values) if values else None


def _fmt(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.0f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or not b else f"{a / b:.2f}"


def _served_over_raw(points: list[Point]) -> list[float]:
    """Portico's MLP throughput over HTTP ÷ raw ONNX Runtime's batch-1 calls/s timed around it,
    one figure per measurement."""
    return [
        p["infer_per_s"] / p["raw_ort_b1_per_s"]
        for p in _measured(points, PORTICO, "mlp", "http", 32)
        if p.get("raw_ort_b1_per_s")
    ]


def _per_round(points: list[Point], server: str, protocol: str, over: str) -> list[float]:
    """``server``'s MLP throughput over ``protocol`` ÷ Portico's over ``over``, in each round
    that measured both."""
    rounds = sorted({p["round"] for p in points if "round" in p})
    ratios = []
    for index in rounds:
        in_round = [p for p in points if p.get("round") == index]
        a = _median(in_round, server, "mlp", protocol, 32, "infer_per_s")
        b = _median(in_round, PORTICO, "mlp", over, 32, "infer_per_s")
        if a is not None and b:
            ratios.append(a / b)
    return ratios


def _ratio_with_rounds(a: float | None, b: float | None, per_round: list[float]) -> str:
    """The medians' ratio, with each round's own and their median where there was more than
    one round. The two can differ: the medians may come from different rounds."""
    cell = _ratio(a, b)
    if len(per_round) > 1 and cell != "—":
        cell += f" (rounds: {_each(per_round)}; median {statistics.median(per_round):.2f})"
    return cell


def _each(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


def _rounds_cell(values: list[float]) -> str:
    """The median of one figure per round, with each round's."""
    if not values:
        return "—"
    cell = f"{statistics.median(values):.2f}"
    if len(values) > 1:
        cell += f" (rounds: {_each(values)})"
    return cell


def table(points: list[Point], variants: tuple[GrpcVariant, ...] = ()) -> tuple[str, str]:
    """The issue's table (medians over rounds) and the ratios the targets are set in."""
    labels = {PORTICO: LABELS[PORTICO], **{v.server: v.label for v in variants},
              **{k: v for k, v in LABELS.items() if k != PORTICO}}  # fmt: skip
    rows = []
    for server, label in labels.items():
        rows.append(
            [
                label,
                _cell(points, server, "mlp", "http", 32, "infer_per_s", "/s"),
                _cell(points, server, "mlp", "grpc", 32, "infer_per_s", "/s"),
                _cell(points, server, "identity", "http", 1, "p50_us", " µs"),
                _cell(points, server, "identity", "grpc", 1, "p50_us", " µs"),
                f"{_fmt(_cpu_per_request_us(points, server, 'http'), ' µs')} / "
                f"{_fmt(_cpu_per_request_us(points, server, 'grpc'), ' µs')}",
                " / ".join(
                    _fmt(_median(points, server, "mlp", proto, 32, "server_avg_exec_batch"))
                    for proto in ("http", "grpc")
                ),
            ]
        )
    main = report.table(
        [
            "server",
            "MLP c=32 HTTP",
            "MLP c=32 gRPC",
            "identity c=1 p50 HTTP",
            "identity c=1 p50 gRPC",
            "server CPU per MLP request, HTTP / gRPC",
            "mean batch, HTTP / gRPC",
        ],
        rows,
    )

    def thr(server: str, protocol: str) -> float | None:
        return _median(points, server, "mlp", protocol, 32, "infer_per_s")

    ratios = report.table(
        ["ratio (MLP c=32 throughput)", "today", "target"],
        [
            [
                "Portico gRPC ÷ Portico HTTP",
                _ratio_with_rounds(
                    thr(PORTICO, "grpc"),
                    thr(PORTICO, "http"),
                    _per_round(points, PORTICO, "grpc", "http"),
                ),
                "≥ 0.9",
            ],
            [
                "Portico gRPC ÷ PyTriton gRPC",
                _ratio(thr(PORTICO, "grpc"), thr(PYTRITON, "grpc")),
                "≥ 1.5",
            ],
            [
                "Portico HTTP ÷ PyTriton HTTP",
                _ratio(thr(PORTICO, "http"), thr(PYTRITON, "http")),
                "≥ 2",
            ],
            [
                "Portico HTTP ÷ raw ONNX Runtime, batch 1, one thread (timed around it)",
                _rounds_cell(_served_over_raw(points)),
                "≥ 0.6",
            ],
            *(
                row
                for variant in variants
                for row in (
                    [
                        f"{variant.label} ÷ Portico HTTP",
                        _ratio_with_rounds(
                            thr(variant.server, "grpc"),
                            thr(PORTICO, "http"),
                            _per_round(points, variant.server, "grpc", "http"),
                        ),
                        "≥ 0.9",
                    ],
                    [
                        f"{variant.label} ÷ PyTriton gRPC",
                        _ratio(thr(variant.server, "grpc"), thr(PYTRITON, "grpc")),
                        "≥ 1.5",
                    ],
                )
            ),
        ],
    )
    return main, ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench peers")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument(
        "--grpc-workers", type=int, default=0,
        help="also measure Portico's gRPC served through this many front-end processes",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-transport", choices=("h2", "h2corn", "grpcio"),
        help="also measure Portico's gRPC with its port on this transport",
    )  # fmt: skip
    args = parser.parse_args(argv)
    variants = (
        *((frontend_variant(args.grpc_workers),) if args.grpc_workers else ()),
        *((transport_variant(args.grpc_transport),) if args.grpc_transport else ()),
    )
    work = Path(os.environ.get("PEERS_HOME", Path(tempfile.gettempdir()) / "portico-peers"))
    points: list[Point] = []
    loads = []
    for index in range(args.rounds):
        before = _load()
        points.extend(run_round(work, reverse=bool(index % 2), window_ms=args.window_ms,
                                variants=variants, index=index))  # fmt: skip
        loads.append(f"round {index + 1}: {before} → {_load()}")
    main_table, ratios = table(points, variants)
    workers = f" --grpc-workers {args.grpc_workers}" if args.grpc_workers else ""
    if args.grpc_transport:
        workers += f" --grpc-transport {args.grpc_transport}"
    body = "\n\n".join(
        [
            "### Beside MLServer and PyTriton (dynamic batching, max batch 32, delay 0)",
            report.machine_line(),
            main_table,
            ratios,
            f"Median of {args.rounds} round(s), server order reversed every round; each protocol "
            "measured on its own freshly started server, gRPC first in odd rounds and HTTP first "
            "in even ones (the ratio's per-round figures pair each round's two). Load average "
            f"(1, 5, 15 min) before → after each round, on a machine shared with other work: "
            f"{'; '.join(loads)}. Server CPU per request is the server's whole process tree's CPU "
            "over the run divided by its throughput; mean batch is the server's own statistics "
            "(inferences ÷ executions, — where the server has none). † perf_analyzer found no "
            "windows within 15 % of each other in some round and measured again accepting a "
            "spread of up to 100 %; — in place of a figure: not even that was reached.",
            f"Reproduce: `python -m bench peers --rounds {args.rounds}{workers}` (it runs "
            "`../shared/peers/run.sh`, which installs MLServer and PyTriton into its own virtual "
            "environment on first use).",
        ]
    )
    report.write_section("peers", body)
    print(main_table, ratios, sep="\n\n")
