"""Python backend (``backend: "python"``): one process per instance running Triton's ``model.py``.

The server side of an instance: it starts ``serving.backends.python.stub`` in its own process,
contained as ``launch.py`` describes (scrubbed environment, own session, dies with the server),
hands it the model (``initialize`` args as Triton builds them), and for each batch writes the
inputs into its shared memory region and sends the descriptors over a socket. A crash of that
process (or an ``execute`` that runs past ``execute_timeout_s``) fails the in-flight requests with a
clear error, makes ``is_healthy()`` false, and a monitor thread restarts the process and reports it
(log, ``restart_count``, ``last_error``). Config ``parameters``: ``execute_timeout_s`` (default
none), ``initialize_timeout_s`` (default 300) and ``bls_timeout_s`` (default 300, ``bls.py``).

The model may speak first: BLS requests (run on the server through the injected ``infer_host``)
and, for a decoupled model, any number of responses per request, during ``execute`` or later from
its own threads; those reach the request's ``ResponseStream`` until the model sends the final flag.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import socket
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from serving.backends.artifacts import model_file
from serving.backends.base import ExecuteResult, ModelInstance
from serving.backends.python import launch, shm
from serving.backends.python.bls import DEFAULT_BLS_TIMEOUT_S, BlsBridge
from serving.backends.python.channel import Tensors
from serving.backends.python.config_json import config_to_dict
from serving.backends.python.error_codes import ERROR_CODES
from serving.backends.python.process import ModelProcess, ProcessGone
from serving.backends.python.stream_notices import StreamNotices
from serving.backends.registry import parameter
from serving.backends.tensors import RequestChecker
from serving.core.loading import InferHost
from serving.core.types import InferRequest, InferResponse
from serving.errors import (
    InternalError,
    InvalidArgumentError,
    ServingError,
    UnavailableError,
)

logger = logging.getLogger(__name__)

DEFAULT_INITIALIZE_TIMEOUT_S = 300.0
FINALIZE_TIMEOUT_S = 10.0
RESTART_BACKOFF_MAX_S = 10.0

_FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL


class PythonInstance(ModelInstance):
    """One Triton ``model.py`` instance in its own process."""

    restart_count = 0
    last_error = ""
    infer_host: InferHost | None = None  # set by the server core before ``load``

    def load(self) -> None:
        self._prefix = shm.instance_prefix()
        self._inputs = shm.Region(self._prefix + "i")
        self._outputs = shm.Reader(track=False)
        self._lock = threading.Lock()
        self._closing = False
        self._checker = RequestChecker(self.spec.config)
        self._model_file = model_file(self.spec, "model.py")
        self._execute_timeout_s = _seconds(self, "execute_timeout_s", None)
        self._init_timeout_s = _seconds(self, "initialize_timeout_s", DEFAULT_INITIALIZE_TIMEOUT_S)
        bls_timeout_s = _seconds(self, "bls_timeout_s", DEFAULT_BLS_TIMEOUT_S)
        assert bls_timeout_s is not None
        self._bls = BlsBridge(
            model_name=self.spec.name, host=self.infer_host, timeout_s=bls_timeout_s
        )
        self._decoupled = self.spec.config.model_transaction_policy.decoupled
        self._streams: dict[int, InferRequest] = {}  # open decoupled requests by stream id
        self._streams_lock = threading.Lock()
        self._stream_ids = itertools.count(1)
        self._notices = StreamNotices(self.placement.name)
        self._generations = itertools.count(1)
        self._child: ModelProcess | None = None
        try:
            self._child = self._start()
        except BaseException:
            self._bls.close()
            self._release_memory()
            raise
        self._healthy = True
        self._monitor = threading.Thread(
            target=self._watch, name=f"python-{self.placement.name}", daemon=True
        )
        self._monitor.start()

    def is_healthy(self) -> bool:
        return getattr(self, "_healthy", False)

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        results: list[ExecuteResult | None] = [None] * len(requests)
        runnable: list[int] = []
        for index, request in enumerate(requests):
            try:
                self._checker.check(request)
                runnable.append(index)
            except ServingError as error:
                results[index] = error
        if runnable:
            batch = [requests[i] for i in runnable]
            for index, result in zip(runnable, self._execute(batch), strict=True):
                results[index] = result
        return [r if r is not None else InternalError("request was not executed") for r in results]

    def unload(self) -> None:
        if not hasattr(self, "_lock"):  # never loaded
            return
        self._closing = True
        with self._lock:
            child, self._child = self._child, None
            self._healthy = False
            self._bls.close()
            self._end_streams("was unloaded")
            self._notices.close()
            if child is not None:
                with contextlib.suppress(ProcessGone):
                    child.request("finalize", None, FINALIZE_TIMEOUT_S)
                child.close()
            self._release_memory()

    @property
    def shm_prefix(self) -> str:
        """The name prefix of every shared memory segment this instance (and its process) uses."""
        return self._prefix

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.process.pid if child is not None else None

    def model_is_ready(self) -> bool:
        """The model's optional ``is_ready()`` (5 s timeout), false when the process is down."""
        if not self.is_healthy():
            return False
        with self._lock:
            if self._child is None:
                return False
            try:
                kind, value = self._child.request("is_ready", None, 5.0)
            except ProcessGone:
                return False
        return kind == "is_ready" and value is True

    # ------------------------------------------------------------------ execution

    def _execute(self, batch: list[InferRequest]) -> list[ExecuteResult]:
        with self._lock:
            child = self._child
            if child is None or not self._healthy:
                return [self._unavailable("is restarting after a failure")] * len(batch)
            try:
                kind, payload = self._execute_message(batch)
            except ServingError as error:
                return [error] * len(batch)
            streams = self._open_streams(batch, payload)
            try:
                kind, payload = child.request(kind, payload, self._execute_timeout_s)
            except ProcessGone as gone:
                self._healthy = False
                self.last_error = f"process {gone}"
                self._close_streams(streams)
                return [self._crashed(str(gone))] * len(batch)
        if kind == "execute_error":
            self._close_streams(streams)
            failure = InternalError(
                f"Failed to process the request(s) for model instance "
                f"'{self.placement.name}', message: {payload}"
            )
            return [failure] * len(batch)
        try:
            return self._results(batch, payload)
        except Exception as error:  # noqa: BLE001 - a garbled reply fails this call only
            self._close_streams(streams)
            return [InternalError(f"python model '{self.spec.name}': {error}")] * len(batch)

    def _execute_message(self, batch: list[InferRequest]) -> tuple[str, Any]:
        tensors = [(f"{i}/{n}", a) for i, r in enumerate(batch) for n, a in r.inputs.items()]
        try:
            descs = self._inputs.write(tensors)
        except TypeError as error:
            raise InvalidArgumentError(str(error)) from error
        per_request: dict[int, list[shm.TensorDesc]] = {}
        for name, datatype, shape, offset, nbytes in descs:
            index, _, tensor = name.partition("/")
            per_request.setdefault(int(index), []).append((tensor, datatype, shape, offset, nbytes))
        outputs = [o.name for o in self.spec.config.output]
        requests = [
            {
                "model_name": self.spec.name,
                "id": r.id,
                "correlation_id": r.sequence_id,
                "flags": (1 if r.sequence_start else 0) | (2 if r.sequence_end else 0),
                "timeout": r.timeout_us,
                "parameters": json.dumps(r.parameters, default=str),
                "requested": outputs if r.outputs is None else [o.name for o in r.outputs],
                "inputs": per_request.get(i, []),
            }
            for i, r in enumerate(batch)
        ]
        return ("execute", {"region": self._inputs.name, "requests": requests})

    def _results(self, batch: list[InferRequest], payload: dict[str, Any]) -> list[ExecuteResult]:
        if payload["responses"] is None:  # decoupled: the responses come through the streams
            return [self._response(request, {}, {}) for request in batch]
        results: list[ExecuteResult] = []
        for request, item in zip(batch, payload["responses"], strict=True):
            if item["error"] is not None:
                results.append(_model_error(item["error"]))
                continue
            outputs = self._outputs.read(payload["region"], item["outputs"])
            results.append(self._response(request, outputs, item["parameters"]))
        return results

    def _response(
        self, request: InferRequest, outputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> InferResponse:
        if request.outputs is not None:
            wanted = {o.name for o in request.outputs}
            outputs = {name: array for name, array in outputs.items() if name in wanted}
        return InferResponse(
            model_name=self.spec.name,
            model_version=self.spec.version,
            outputs=outputs,
            id=request.id,
            parameters=parameters,
        )

    # ------------------------------------------------------------------ the model speaking first

    def _open_streams(self, batch: list[InferRequest], message: dict[str, Any]) -> list[int]:
        """Give each request of a decoupled model's batch an id its sender answers to.

        A request without a stream (warm-up, a candidate check) still gets one: its responses are
        dropped, and its result says only that execute succeeded.
        """
        if not self._decoupled:
            return []
        ids = []
        with self._streams_lock:
            for request, desc in zip(batch, message["requests"], strict=True):
                stream = next(self._stream_ids)
                self._streams[stream] = request
                desc["stream"] = stream
                ids.append(stream)
                if request.responses is not None:
                    request.responses.on_cancel = functools.partial(self._cancel_stream, stream)
                    request.responses.on_flow = functools.partial(self._flow_stream, stream)
        return ids

    def _cancel_stream(self, stream: int) -> None:
        """The client went away (on the loop): drop what follows, tell the model it may stop."""
        with self._streams_lock:
            self._streams.pop(stream, None)
        self._notify("cancel", stream)

    def _flow_stream(self, stream: int, held_back: bool) -> None:
        """The client lags (True) or caught up (False): the model's sends wait or go on."""
        self._notify("flow", (stream, held_back))

    def _notify(self, kind: str, payload: Any) -> None:
        child = self._child
        if child is not None:
            self._notices.send(child, kind, payload)

    def _close_streams(self, ids: list[int]) -> None:
        """Forget streams whose execute failed (the server core ends them with that error)."""
        with self._streams_lock:
            for stream in ids:
                self._streams.pop(stream, None)

    def _end_streams(self, why: str) -> None:
        """End every open stream with an error: the process that would answer them is gone."""
        with self._streams_lock:
            requests = list(self._streams.values())
            self._streams.clear()
        for request in requests:
            if request.responses is not None:
                request.responses.put(self._unavailable(why), final=True)

    def _model_message(
        self, child: ModelProcess, kind: str, payload: dict[str, Any], tensors: Tensors
    ) -> None:
        """A message the model sent on its own (on the channel's reader thread)."""
        if kind == "bls":
            self._bls.submit(child.channel, payload, tensors)
        elif kind == "bls_taken":
            self._bls.taken(child.channel, payload["call"])
        elif kind == "bls_cancel":
            self._bls.cancel(child.channel, payload["call"])
        elif kind == "response":
            self._stream_response(payload, tensors)
        else:
            logger.warning("python model '%s' sent an unknown message '%s'", self.spec.name, kind)

    def _stream_response(self, payload: dict[str, Any], tensors: Tensors) -> None:
        final = bool(payload["flags"] & _FINAL)
        with self._streams_lock:
            stream = payload["stream"]
            request = self._streams.pop(stream, None) if final else self._streams.get(stream)
        if request is None or request.responses is None:
            return  # that request already failed; Triton drops such late responses too
        item = payload["item"]
        response: ExecuteResult | None = None
        if item is not None and item["error"] is not None:
            response = _model_error(item["error"])
        elif item is not None:
            response = self._response(request, tensors, item["parameters"])
        request.responses.put(response, final=final)

    def _unavailable(self, what: str) -> UnavailableError:
        return UnavailableError(
            f"python model '{self.spec.name}' instance '{self.placement.name}' {what}"
        )

    def _crashed(self, reason: str) -> UnavailableError:
        return self._unavailable(f"stopped while executing the request ({reason}); restarting it")

    # ------------------------------------------------------------------ process lifecycle

    def _start(self) -> ModelProcess:
        parent_sock, child_sock = socket.socketpair()
        try:
            process = launch.launch(
                launch.stub_command(str(child_sock.fileno()), self._prefix + "o"),
                pass_fds=[child_sock.fileno()],
                # NOTE: a model's print() goes to stderr: stdout may be a protocol (serving.check).
                stdout=2,
            )
        finally:
            child_sock.close()
        child = ModelProcess(
            process,
            Connection(parent_sock.detach()),
            side_prefix=f"{self._prefix}b{next(self._generations)}_",
            on_message=self._model_message,
            on_close=self._process_closed,
            name=f"python-{self.placement.name}-channel",
        )
        try:
            kind, payload = child.request("init", self._init_payload(), self._init_timeout_s)
        except ProcessGone as gone:
            child.close()
            raise self._load_error(f"its process {gone} during initialize") from None
        if kind != "ready":
            child.close()
            raise self._load_error(str(payload))
        return child

    def _init_payload(self) -> dict[str, Any]:
        kind = self.placement.kind.removeprefix("KIND_")
        args = {
            "model_config": json.dumps(config_to_dict(self.spec.config)),
            "model_instance_kind": kind if kind in ("CPU", "GPU") else "MODEL",
            "model_instance_name": self.placement.name,
            "model_instance_device_id": str(self.placement.device_id),
            "model_repository": str(self.spec.model_dir),
            "model_version": str(self.spec.version),
            "model_name": self.spec.name,
        }
        return {"model_file": str(self._model_file), "args": args}

    def _load_error(self, why: str) -> UnavailableError:
        return UnavailableError(
            f"failed to load model '{self.spec.name}' version {self.spec.version}: {why}"
        )

    def _watch(self) -> None:
        """Restart the process whenever it dies while the instance is loaded."""
        failures = 0
        while not self._closing:
            child = self._child
            if child is None:
                return
            child.process.wait()
            if self._closing:
                return
            with self._lock:  # wait for an in-flight execute to fail its requests first
                self._healthy = False
                reason = child.exit_reason()
                self.last_error = f"process {reason}"
                launch.kill(child.process)  # whatever it forked goes with it
                child.release()
                shm.unlink_prefixed(self._prefix + "o")
                self._outputs.close()
            logger.error(
                "python model '%s' instance '%s': process %s; restarting",
                self.spec.name,
                self.placement.name,
                reason,
            )
            failures = self._restart(failures)

    def _restart(self, failures: int) -> int:
        while not self._closing:
            try:
                child = self._start()
            except ServingError as error:
                failures += 1
                self.last_error = error.message
                delay = min(RESTART_BACKOFF_MAX_S, 0.5 * failures)
                logger.error("restart of '%s' failed (%s); retrying", self.spec.name, error)
                time.sleep(delay)
                continue
            with self._lock:
                if self._closing:
                    child.close()
                    return failures
                self._child = child
                self.restart_count += 1
                self._healthy = True
            logger.warning(
                "python model '%s' instance '%s' restarted (restart %d)",
                self.spec.name,
                self.placement.name,
                self.restart_count,
            )
            return 0
        return failures

    def _process_closed(self, child: ModelProcess) -> None:
        """The process's channel closed (it died, or it ended after ``finalize``)."""
        self._end_streams(f"stopped ({child.exit_reason()})")

    def _release_memory(self) -> None:
        self._inputs.close()
        self._outputs.close()
        shm.unlink_prefixed(self._prefix)


def _model_error(error: tuple[int, str]) -> ServingError:
    code, message = error
    return ServingError(message, code=ERROR_CODES.get(code))


def _seconds(instance: PythonInstance, key: str, default: float | None) -> float | None:
    value = parameter(instance.spec.config, key)
    if value is None or not value.strip():
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise UnavailableError(
            f"model '{instance.spec.name}': parameter '{key}' must be a number of seconds"
        ) from None
    return seconds if seconds > 0 else default
