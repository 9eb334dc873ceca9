"""A long mixed gRPC load on one serving process: does a transport stay correct and bounded?

`python -m bench.grpc_soak [--minutes 30] [--grpc-transport h2corn]` serves the MLP and the
identity model (as `bench cost` configures them) and, for the whole time, runs at once:

- perf_analyzer on the MLP at concurrency 16 (unary calls on long-lived connections), in
  back-to-back runs of three 20 s windows; a run that ends in error is counted;
- a ``ModelStreamInfer`` stream on the identity model, each answer checked against its request,
  the stream closed and opened again every 500 requests;
- connection churn: a new channel for every call (identity, answer checked), closed after it;
- calls that end early: a deadline too short to meet (DEADLINE_EXCEEDED or an answer are both
  right) and calls the client cancels right after sending.

Every 30 s it samples the serving process's memory (RSS), open descriptors, threads and the lines
it wrote to standard error. At the end the server must still answer, no answer may have been
wrong, no call may have failed with a status other than the ones its workload asks for, and the
statistics must count at least the requests the checked clients saw answered. It prints what it
saw; it is a check to run before changing a transport (``--grpc-transport h2`` soaks the loop's
own listener), not a speed benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from bench import perf_analyzer
from bench.cost import counts, write_models
from bench.server import serving

SAMPLE_EVERY_S = 30
STREAM_REOPEN_EVERY = 500


@dataclasses.dataclass
class Tally:
    """What the workloads saw, by workload: answers checked, wrong answers, statuses."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    checked: Counter[str] = dataclasses.field(default_factory=Counter)
    wrong: Counter[str] = dataclasses.field(default_factory=Counter)
    expected: Counter[str] = dataclasses.field(default_factory=Counter)
    unexpected: Counter[str] = dataclasses.field(default_factory=Counter)

    def add(self, counter: str, key: str) -> None:
        with self.lock:
            getattr(self, counter)[key] += 1


def _identity_input(rng: np.random.Generator) -> tuple[triton_grpc.InferInput, bytes]:
    """A random identity request, and the bytes its answer must echo."""
    data = rng.random((1, 16), dtype=np.float32)
    tensor = triton_grpc.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(data)
    return tensor, data.tobytes()


def stream_worker(url: str, tally: Tally, stop: threading.Event) -> None:
    rng = np.random.default_rng(1)
    while not stop.is_set():
        client = triton_grpc.InferenceServerClient(url)
        answers: list[object] = []
        arrived = threading.Semaphore(0)

        def callback(
            result: object, error: object, answers: list[object] = answers,
            arrived: threading.Semaphore = arrived,
        ) -> None:  # fmt: skip
            answers.append(error if error is not None else result)
            arrived.release()

        client.start_stream(callback=callback)
        try:
            for _ in range(STREAM_REOPEN_EVERY):
                if stop.is_set():
                    break
                tensor, sent = _identity_input(rng)
                client.async_stream_infer("identity", [tensor])
                if not arrived.acquire(timeout=30):
                    tally.add("unexpected", "stream: no answer in 30 s")
                    break
                answer = answers.pop()
                if isinstance(answer, Exception):
                    tally.add("unexpected", f"stream: {answer}")
                elif answer.as_numpy("OUTPUT0").tobytes() != sent:  # type: ignore[attr-defined]
                    tally.add("wrong", "stream")
                else:
                    tally.add("checked", "stream")
        finally:
            client.stop_stream()
            client.close()


def churn_worker(url: str, tally: Tally, stop: threading.Event) -> None:
    rng = np.random.default_rng(2)
    while not stop.is_set():
        tensor, sent = _identity_input(rng)
        with contextlib.closing(triton_grpc.InferenceServerClient(url)) as client:
            try:
                result = client.infer("identity", [tensor])
            except Exception as exc:  # noqa: BLE001 - every failure is counted, not raised
                tally.add("unexpected", f"churn: {exc}")
                continue
        if result.as_numpy("OUTPUT0").tobytes() != sent:
            tally.add("wrong", "churn")
        else:
            tally.add("checked", "churn")


def early_end_worker(url: str, tally: Tally, stop: threading.Event) -> None:
    request = service_pb2.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 256])
    request.raw_input_contents.append(np.ones((1, 256), np.float32).tobytes())
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while not stop.is_set():
            try:
                stub.ModelInfer(request, timeout=0.0005)
                tally.add("expected", "deadline: answered in time")
            except grpc.RpcError as exc:
                late = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                tally.add("expected" if late else "unexpected", f"deadline: {exc.code().name}")
            future = stub.ModelInfer.future(request)
            future.cancel()
            try:
                future.result(timeout=30)
                tally.add("expected", "cancel: answered first")
            except grpc.FutureCancelledError:
                tally.add("expected", "cancel: CANCELLED")
            except grpc.RpcError as exc:
                tally.add("unexpected", f"cancel: {exc.code().name}")
            time.sleep(0.01)


def load_worker(url: str, tally: Tally, stop: threading.Event) -> None:
    while not stop.is_set():
        completed = subprocess.run(
            [perf_analyzer.find_perf_analyzer(), "-m", "mlp", "-i", "grpc", "-u", url,
             "--concurrency-range", "16", "--measurement-interval", "20000",
             "--stability-percentage", "10000", "--max-trials", "3"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        key = "expected" if completed.returncode == 0 else "unexpected"
        tally.add(key, f"perf_analyzer run rc {completed.returncode}")
        if completed.returncode != 0:
            print(completed.stdout[-2000:], completed.stderr[-2000:], file=sys.stderr)


@dataclasses.dataclass
class Sample:
    minute: float
    rss_mib: float
    fds: int
    threads: int
    stderr_lines: int


def sample(pid: int, started: float, stderr_file: Path) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return Sample(
        minute=(time.monotonic() - started) / 60,
        rss_mib=int(fields["VmRSS"].split()[0]) / 1024,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(fields["Threads"]),
        stderr_lines=len(stderr_file.read_text(errors="replace").splitlines()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--grpc-transport", default="h2corn")
    args = parser.parse_args(argv)
    workers: list[Callable[[str, Tally, threading.Event], None]] = [
        load_worker, stream_worker, churn_worker, early_end_worker,
    ]  # fmt: skip
    tally, stop = Tally(), threading.Event()
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory() as folder:
        repo, stderr_file = Path(folder) / "models", Path(folder) / "serve.log"
        repo.mkdir()
        write_models(repo)
        with (
            stderr_file.open("wb") as output,
            serving(
                repo, extra_args=("--grpc-transport", args.grpc_transport), output=output
            ) as addresses,
        ):
            pid, http, url = int(addresses["pid"]), addresses["http"], addresses["grpc"]
            started = time.monotonic()
            threads = [threading.Thread(target=w, args=(url, tally, stop), daemon=True)
                       for w in workers]  # fmt: skip
            for thread in threads:
                thread.start()
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(SAMPLE_EVERY_S)
                samples.append(sample(pid, started, stderr_file))
                print(samples[-1], flush=True)
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
            ready = urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=5).status
            served = counts(http, "identity")[0]
            log_tail = stderr_file.read_text(errors="replace").splitlines()[-20:]
    print(f"\ntransport {args.grpc_transport}, {args.minutes:g} minutes; ready at the end: {ready}")
    print(f"checked answers: {dict(tally.checked)}")
    print(f"wrong answers:   {dict(tally.wrong)}")
    print(f"expected ends:   {dict(tally.expected)}")
    print(f"unexpected:      {dict(tally.unexpected)}")
    print(f"identity requests counted by the server: {served}")
    first, last = samples[min(3, len(samples) - 1)], samples[-1]
    print(f"RSS {first.rss_mib:.0f} MiB at minute {first.minute:.1f} -> {last.rss_mib:.0f} MiB; "
          f"fds {first.fds} -> {last.fds}; threads {first.threads} -> {last.threads}; "
          f"stderr lines {last.stderr_lines}")  # fmt: skip
    print("last lines of the server's output:", *log_tail, sep="\n  ")
    checked = tally.checked["stream"] + tally.checked["churn"]
    ok = ready == 200 and not tally.wrong and not tally.unexpected and served >= checked
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
