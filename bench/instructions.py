"""Instructions per request: what Portico's request path costs, counted rather than timed.

`python -m bench.instructions [--requests N] [--baseline DIR ...]` serves the identity model (FP32
[1,16], no dynamic batching, as `python -m bench protocol` does) under valgrind's callgrind, from
this tree, from each ``DIR`` given, and beside them the transport floor
(`bench/transport_floor.py`).
It sends N binary-tensor requests one at a time over HTTP and over gRPC after a warm-up, and counts
the instructions the server process executed for them (callgrind's instrumentation is switched on
for exactly that stretch). Served minus floor is Portico's own share of the request path.

Latency at concurrency 1 on a small shared machine swings by a third between runs of the same
build, far more than most changes to the request path move it; an instruction count repeats to
within a fraction of a percent. It leaves out what the kernel does for a system call and what a
cache miss costs, so it complements the latency tables and does not replace them.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import orjson

from bench import report
from bench.server import ROOT, serving, transport_floor

WARM_UP_REQUESTS = 300
# callgrind takes a command when the process next runs; an idle server may take a moment.
COMMAND_PICKUP_S = 2.0
STARTUP_UNDER_VALGRIND_S = 600.0
INPUT = np.arange(16, dtype=np.float32).reshape(1, 16)
INLINE_ALWAYS = """
parameters { key: "inline_execution_budget_us" value { string_value: "100000000" } }
"""


def http_client(address: str) -> Callable[[int], None]:
    """Sends ``n`` binary-tensor infer requests on one keep-alive connection."""
    header = orjson.dumps({
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                    "parameters": {"binary_data_size": INPUT.nbytes}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    })  # fmt: skip
    body = header + INPUT.tobytes()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=600)

    def send(n: int) -> None:
        for _ in range(n):
            connection.request("POST", "/v2/models/identity/infer", body, headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"infer answered {answer.status}")

    return send


def grpc_client(address: str) -> Callable[[int], None]:
    """Sends ``n`` ModelInfer calls with raw input contents on one channel."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(INPUT.tobytes())

    def send(n: int) -> None:
        for _ in range(n):
            stub.ModelInfer(request, timeout=600)

    return send


CLIENTS = {"http": http_client, "grpc": grpc_client}


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def counted_instructions(pid: int, out_prefix: Path, send: Callable[[int], None], n: int) -> int:
    """Instructions ``pid`` executed while ``send(n)`` ran (instrumentation on for just that)."""
    send(WARM_UP_REQUESTS)
    _callgrind(pid, "--instr=on")
    time.sleep(COMMAND_PICKUP_S)
    send(n)
    time.sleep(COMMAND_PICKUP_S / 2)
    _callgrind(pid, "--instr=off")
    _callgrind(pid, "--dump")
    totals = []
    for dump in out_prefix.parent.glob(f"{out_prefix.name}*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                totals.append(int(line.split()[1]))
    for dump in out_prefix.parent.glob(f"{out_prefix.name}*"):
        dump.unlink()
    return max(totals, default=0)


@contextlib.contextmanager
def _target(root: Path | None, out: Path, repo: Path) -> Iterator[dict[str, str]]:
    """The serving process of the tree at ``root`` (None: the transport floor) under callgrind."""
    wrapper = (
        "valgrind", "--tool=callgrind", "--instr-atstart=no",
        f"--callgrind-out-file={out}.%p",
    )  # fmt: skip
    if root is None:
        with transport_floor(startup_timeout_s=STARTUP_UNDER_VALGRIND_S, wrapper=wrapper) as found:
            yield found
        return
    with serving(
        repo, startup_timeout_s=STARTUP_UNDER_VALGRIND_S, wrapper=wrapper, root=root
    ) as found:
        yield found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument(
        "--baseline", type=Path, action="append", default=[],
        help="another tree to count beside this one (may be given more than once)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    trees: dict[str, Path | None] = {"this tree": ROOT}
    trees.update({report.tree_commit(tree): tree for tree in args.baseline})
    trees["floor"] = None
    counts: dict[tuple[str, str], int] = {}
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder) / "repo"
        _write_identity(repo)
        for index, (label, root) in enumerate(trees.items()):
            out = Path(folder) / f"callgrind.{index}"
            with _target(root, out, repo) as addresses:
                for protocol, client in CLIENTS.items():
                    send = client(addresses[protocol])
                    total = counted_instructions(int(addresses["pid"]), out, send, args.requests)
                    counts[(label, protocol)] = total // args.requests
                    print(f"{label} {protocol}: {counts[(label, protocol)]:,} instructions/request")
    report.write_section("instructions", _body(list(trees)[:-1], counts, args.requests))


def _write_identity(repo: Path) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    django.setup()
    from repository import demo_models

    demo_models.write_onnx_identity(repo, name="identity", dtype="FP32", max_batch_size=8)
    # NOTE: under valgrind every run looks slow, so the scheduler would move this cheap model's
    # runs to a thread (``serving.schedulers.inline``); at native speed they run on the loop.
    # A budget no run reaches keeps the path counted the one that runs natively.
    with (repo / "identity" / "config.pbtxt").open("a") as config:
        config.write(INLINE_ALWAYS)


def _body(trees: list[str], counts: dict[tuple[str, str], int], requests: int) -> str:
    rows = []
    for protocol in CLIENTS:
        floor = counts[("floor", protocol)]
        ours = counts[(trees[0], protocol)] - floor
        for label in trees:
            share = counts[(label, protocol)] - floor
            rows.append([
                protocol.upper(), label if label == trees[0] else f"`{label}`", f"{floor:,}",
                f"{counts[(label, protocol)]:,}", f"{share:,}", f"{ours / share:.2f}",
            ])  # fmt: skip
    baselines = trees[1:]
    worktrees = "".join(f"`git worktree add ../{commit} {commit}`, " for commit in baselines)
    options = "".join(f" --baseline ../{commit}" for commit in baselines)
    parts = [
        "### Instructions per request: identity model (FP32 [1,16]), one request at a time",
        report.machine_line(),
        report.table(
            [
                "protocol",
                "tree",
                "floor",
                "served",
                "Portico adds",
                "this tree's share ÷ this row's",
            ],
            rows,
        ),
        f"Counted by callgrind over {requests:,} sequential binary requests after "
        f"{WARM_UP_REQUESTS} warm-up ones, server process only, all its threads. The floor is "
        "`bench/transport_floor.py`: an echo model on stock uvicorn (its own httptools "
        "protocol) and stock grpc.aio, what a server built plainly on these libraries costs. "
        "Portico's HTTP listener runs its own connection protocol on httptools "
        "(`serving/protocol/http/connection.py`), so its share includes, and saves on, "
        'transport work the floor does its own way. "Portico adds" is served minus floor. '
        "Other trees are named by their commit.",
        f"Reproduce: {worktrees}then `python -m bench.instructions --requests {requests}{options}`"
        if baselines
        else f"Reproduce: `python -m bench.instructions --requests {requests}`",
    ]
    return "\n\n".join(parts)


if __name__ == "__main__":
    main(sys.argv[1:])
