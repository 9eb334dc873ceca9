"""What one gRPC call costs the HTTP/2 listener itself, in memory: no socket, scheduler or model.

`python -m bench.grpc_edge [--baseline ../before] [--rounds 5]` feeds batches of 32 ModelInfer
calls (identity-sized: one 1×16 FP32 input), as one read, into the listener's connection and
counts the loop thread's CPU until every answer is written. The server behind it answers each
request at once with its input, so what is counted is the edge's work: HTTP/2 (``jh2``), the
gRPC framing, dispatch, the in-flight cap, the servicer and the protobuf codec.

Beside it, in the same run, the HTTP/2 library alone on the same frames (parse them, answer each
stream with the same headers, message and trailers): the floor any listener on that library pays.
With ``--baseline`` the edge of another tree (its ``serving`` package) is measured in alternating
rounds too. The client is ``h2`` (pure Python, the tests' client); its work is not counted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.server import ROOT

BATCH = 32
WARMUP_BATCHES = 20
MODEL_INFER = b"/inference.GRPCInferenceService/ModelInfer"
REQUEST_HEADERS = [
    (b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"), (b"te", b"trailers"),
    (b"user-agent", b"grpc-c++/1.67.1 grpc-c/44.0.0 (linux; chttp2)"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
]  # fmt: skip


def _request_message() -> bytes:
    """One length-prefixed ModelInferRequest, as tritonclient sends it."""
    import numpy as np
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.outputs.add(name="OUTPUT0")
    request.raw_input_contents.append(np.zeros((1, 16), np.float32).tobytes())
    body = request.SerializeToString()
    return b"\0" + len(body).to_bytes(4, "big") + body


class _Client:
    """An ``h2`` client connection that writes batches of calls and reads their answers."""

    def __init__(self, path: bytes = MODEL_INFER) -> None:
        import h2.config
        import h2.connection

        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        self.message = _request_message()
        self.headers = [(b":path", path), *REQUEST_HEADERS]

    def batch(self) -> bytes:
        for _ in range(BATCH):
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(sid, self.headers)
            self.h2.send_data(sid, self.message, end_stream=True)
        return self.h2.data_to_send()

    def answers(self, data: bytes) -> int:
        """Read the server's bytes; the calls that ended OK. Their data is acknowledged."""
        import h2.events

        ended = 0
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.TrailersReceived):
                ended += (b"grpc-status", b"0") in event.headers
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        return ended


class _Transport:
    """What the connection writes, kept for the client to read."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def take(self) -> bytes:
        data = b"".join(self.written)
        self.written.clear()
        return data

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def measure_edge(batches: int, path: bytes = MODEL_INFER) -> float:
    """Server CPU µs per call of the listener's connection, over ``batches`` batches of calls to
    ``path``; every call must end OK."""
    import asyncio
    import types

    import uvloop

    from serving.core.types import InferResponse
    from serving.protocol.admission import InFlightLimit
    from serving.protocol.grpc.calls import Dispatcher
    from serving.protocol.grpc.http2_connection import GrpcHttp2Connection, HeldBytes
    from serving.protocol.grpc.service import register_services

    class Settings:
        grpc_restricted_protocols = ""

    class AnswersAtOnce:
        """The ``InferenceServer`` surface ModelInfer uses: the input comes back as the output."""

        settings, live, ready = Settings(), True, True
        # No request-bytes budget (a bare stand-in: a baseline tree may not have the class).
        request_bytes = types.SimpleNamespace(limit=0, take_inputs=lambda inputs: 0)

        async def infer(self, request: Any, decoupled_error: str = "") -> InferResponse:
            return InferResponse(request.model_name, 1, {"OUTPUT0": request.inputs["INPUT0"]})

    async def run() -> float:
        limit = InFlightLimit(1 << 20)
        server: Any = AnswersAtOnce()
        dispatcher = Dispatcher(lambda target: register_services(target, server, None, limit))
        connection = GrpcHttp2Connection(
            dispatcher, max_message_bytes=64 << 20, on_open=_ignore, on_close=_ignore,
            listener_held=HeldBytes(64 << 20),
        )  # fmt: skip
        transport, client = _Transport(), _Client(path)
        connection.connection_made(transport)
        client.answers(transport.take())
        connection.data_received(client.h2.data_to_send())
        client.answers(transport.take())
        used, counted = 0.0, 0
        for index in range(WARMUP_BATCHES + batches):
            data = client.batch()
            began = time.thread_time()
            connection.data_received(data)
            for _ in range(8):  # the calls' tasks run, answer, and the write goes out
                await asyncio.sleep(0)
            spent = time.thread_time() - began
            ended = client.answers(transport.take())
            if ended != BATCH:
                raise RuntimeError(f"{ended} of {BATCH} calls answered OK")
            if index >= WARMUP_BATCHES:
                used, counted = used + spent, counted + BATCH
            acknowledgements = client.h2.data_to_send()
            if acknowledgements:
                connection.data_received(acknowledgements)
        return used / counted * 1e6

    return uvloop.run(run())


def measure_library(batches: int) -> float:
    """The HTTP/2 library alone: CPU µs per call to parse the same frames and answer them."""
    import jh2.events
    from jh2.connection import H2Connection

    from serving.protocol.grpc import http2_wire as wire
    from serving.protocol.grpc.http2_connection import PROTOCOL_CONFIG

    server, client = H2Connection(config=PROTOCOL_CONFIG), _Client()
    server.initiate_connection()
    client.answers(server.data_to_send())
    server.receive_data(client.h2.data_to_send())
    client.answers(server.data_to_send())
    answer = wire.frame_message(bytes(80))  # about a ModelInferResponse of 16 floats
    used, counted = 0.0, 0
    for index in range(WARMUP_BATCHES + batches):
        data = client.batch()
        began = time.thread_time()
        for event in server.receive_data(data):
            if isinstance(event, jh2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, jh2.events.StreamEnded):
                server.send_headers(event.stream_id, wire.ANSWER_HEADERS)
                server.send_data(event.stream_id, answer)
                server.send_headers(event.stream_id, wire.OK_TRAILERS, end_stream=True)
        out = server.data_to_send()
        spent = time.thread_time() - began
        if client.answers(out) != BATCH:
            raise RuntimeError("the library did not answer every call OK")
        if index >= WARMUP_BATCHES:
            used, counted = used + spent, counted + BATCH
        server.receive_data(client.h2.data_to_send())
    return used / counted * 1e6


def _ignore(connection: Any) -> None:
    pass


MEASURES = {"edge": measure_edge, "library": measure_library}


def _measure_in(root: Path, what: str, batches: int) -> float:
    """One measurement in a fresh process importing ``serving`` from ``root``."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.grpc_edge", "--measure", what, "--batches", str(batches),
         "--serving-root", str(root)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_edge")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--baseline", type=Path, help="another tree whose edge to measure too")
    parser.add_argument("--measure", choices=sorted(MEASURES), help=argparse.SUPPRESS)
    parser.add_argument("--serving-root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:  # one measurement, in this process
        if args.serving_root is not None:
            sys.path.insert(0, str(args.serving_root.resolve()))
        print(f"{MEASURES[args.measure](args.batches):.2f}")
        return
    targets = [("this tree", ROOT, "edge")]
    if args.baseline is not None:
        targets.append(("baseline", args.baseline.resolve(), "edge"))
    targets.append(("jh2 alone", ROOT, "library"))
    found: dict[str, list[float]] = {label: [] for label, _, _ in targets}
    for round_index in range(args.rounds):
        order = targets if round_index % 2 == 0 else targets[::-1]
        for label, root, what in order:
            found[label].append(_measure_in(root, what, args.batches))
            print(f"round {round_index + 1}: {label} {found[label][-1]:.1f} µs", flush=True)
    _write(found, args)


def _write(found: dict[str, list[float]], args: argparse.Namespace) -> None:
    library = statistics.median(found["jh2 alone"])
    rows = []
    for label, values in found.items():
        median = statistics.median(values)
        above = "—" if label == "jh2 alone" else f"{median - library:.1f}"
        rows.append([label, f"{median:.1f}", above, " / ".join(f"{v:.1f}" for v in values)])
    command = "python -m bench.grpc_edge" + (" --baseline ../before" if args.baseline else "")
    body = "\n".join([
        "### Server CPU per gRPC call on the HTTP/2 listener, in memory (no socket, no model)",
        "",
        report.machine_line("the client's work not counted"),
        "",
        report.table(["edge", "CPU µs per call (median)", "µs above jh2 alone", "each round"],
                     rows),
        "",
        f"Batches of {BATCH} identity-sized ModelInfer calls written as one read; "
        f"{args.batches} batches per measurement, each in a fresh process, {args.rounds} "
        "alternating rounds. The server behind the listener answers every request at once "
        "with its input, so a row is the listener's own work: HTTP/2, gRPC framing, dispatch, "
        "the in-flight cap, the servicer and the protobuf codec. \"jh2 alone\" is the HTTP/2 "
        "library parsing the same frames and answering each stream with the same headers, "
        "message and trailers: what any listener on it pays.",
        "",
        f"Reproduce: `{command}`",
    ])  # fmt: skip
    report.write_section("grpc-edge", body)


if __name__ == "__main__":
    main()
