"""The process that runs one Python model instance (``python -m serving.backends.python.stub FD
PREFIX``).

It loads ``model.py`` with ``triton_python_backend_utils`` registered under that name, then runs
the server's commands on its main thread, one at a time: ``init``, ``execute``, ``is_ready``,
``finalize``. The socket ``FD`` is read by the channel's thread, so while ``execute`` runs the
model can send BLS requests and decoupled responses (from any thread) and receive the answers.
Execute's input tensors are read from the server's shared memory region, its outputs written to
this process's own region (names starting with ``PREFIX``). When the server goes away (EOF) it
finalises quietly and exits.

``python -m serving.backends.python.stub --autocomplete MODEL_FILE CONFIG_IN CONFIG_OUT`` runs the
model's ``auto_complete_config`` once, in a throw-away interpreter, as Triton does.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

from serving.backends.python import shm
from serving.backends.python import triton_python_backend_utils as pb_utils
from serving.backends.python.channel import Channel, ChannelClosed, Tensors
from serving.backends.python.server_link import ServerLink, encode_response

_FLAG_START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
_FLAG_END = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


def _no_tracking(*_: Any, **__: Any) -> None:
    return None


def load_module(model_file: Path) -> ModuleType:
    """Import ``model.py`` the way Triton does: its folder on sys.path, pb_utils importable."""
    sys.modules["triton_python_backend_utils"] = pb_utils
    folder = str(model_file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("model", model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise AttributeError(f"{model_file.name} does not define class TritonPythonModel")
    return module


def _describe(error: BaseException) -> str:
    if isinstance(error, pb_utils.TritonModelException):
        return error.message()
    return f"{type(error).__name__}: {error}"


_loop: asyncio.AbstractEventLoop | None = None
_out_prefix = ""  # this process's output segments, unlinked if the server vanishes


def _call(function: Any, *args: Any) -> Any:
    """Call a model method; ``async def`` ones run on the instance's one event loop."""
    global _loop
    result = function(*args)
    if inspect.isawaitable(result):
        if _loop is None:
            _loop = asyncio.new_event_loop()
        result = _loop.run_until_complete(result)
    return result


class Stub:
    """One model instance: the user's TritonPythonModel plus the shared memory plumbing."""

    def __init__(self, conn: Connection, out_prefix: str) -> None:
        self.model: Any = None
        self.decoupled = False
        self.reader = shm.Reader(track=False)
        self.region = shm.Region(out_prefix, track=False)
        self.commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.channel = Channel(
            conn,
            side_prefix=out_prefix + "s",
            handle=self._received,
            on_close=self._server_gone,
            track=False,
            name="server-channel",
        )
        self.link = ServerLink(self.channel)
        pb_utils._server_link = self.link

    def serve(self) -> None:
        self.channel.start()
        while True:
            kind, payload = self.commands.get()
            try:
                if kind == "init":
                    self.channel.send(*self._init(payload))
                elif kind == "execute":
                    self.channel.send(*self._execute(payload))
                elif kind == "is_ready":
                    self.channel.send(*self._is_ready())
                elif kind == "finalize":
                    self._finalize()
                    self.channel.send("finalized")
                    return
                elif kind == "closed":
                    self._finalize()
                    return
            except ChannelClosed:
                self._finalize()
                return

    def _received(self, kind: str, payload: Any, tensors: Tensors) -> None:
        if kind == "bls_result":
            self.link.handle_result(payload, tensors)
        elif kind == "cancel":
            self.link.cancelled(payload)
        elif kind == "flow":
            self.link.hold_back(*payload)
        else:
            self.commands.put((kind, payload))

    def _server_gone(self) -> None:
        self.link.fail_all()
        self.commands.put(("closed", None))

    def _init(self, payload: dict[str, Any]) -> tuple[str, Any]:
        try:
            config = json.loads(payload["args"]["model_config"])
            self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
            module = load_module(Path(payload["model_file"]))
            self.model = module.TritonPythonModel()
            if hasattr(self.model, "initialize"):
                _call(self.model.initialize, payload["args"])
            return ("ready", None)
        except BaseException as error:  # noqa: BLE001 - the text becomes the load error
            traceback.print_exc()
            return ("init_error", _describe(error))

    def _execute(self, payload: dict[str, Any]) -> tuple[str, Any]:
        try:
            requests = [self._request(r, payload["region"]) for r in payload["requests"]]
            responses = _call(self.model.execute, requests)
            if self.decoupled:
                _check_decoupled_return(responses)
                return ("executed", {"region": "", "responses": None})
            return ("executed", self._responses(responses, len(requests)))
        except Exception as error:  # noqa: BLE001 - fails every request of this call
            traceback.print_exc()
            return ("execute_error", _describe(error))

    def _request(self, desc: dict[str, Any], region: str) -> pb_utils.InferenceRequest:
        arrays = self.reader.read(region, desc["inputs"])
        request = pb_utils.InferenceRequest(
            model_name=desc["model_name"],
            inputs=[pb_utils.Tensor(name, array) for name, array in arrays.items()],
            requested_output_names=desc["requested"],
            request_id=desc["id"],
            correlation_id=desc["correlation_id"],
            flags=desc["flags"],
            timeout=desc["timeout"],
            parameters=desc["parameters"],
        )
        request._stream = desc.get("stream")
        return request

    def _responses(self, responses: Any, expected: int) -> dict[str, Any]:
        if not isinstance(responses, list | tuple) or len(responses) != expected:
            count = len(responses) if isinstance(responses, list | tuple) else type(responses)
            raise pb_utils.TritonModelException(
                f"execute returned {count} responses for {expected} requests; it must return "
                f"one InferenceResponse per request, in order"
            )
        tensors: list[tuple[str, Any]] = []
        items: list[dict[str, Any]] = []
        for response in responses:
            if not isinstance(response, pb_utils.InferenceResponse):
                raise pb_utils.TritonModelException(
                    f"execute returned a {type(response).__name__} where an InferenceResponse "
                    f"was expected"
                )
            item, outputs = encode_response(response)
            item["outputs"] = (len(tensors), len(tensors) + len(outputs))
            tensors.extend(outputs)
            items.append(item)
        descs = self.region.write(tensors)
        for item in items:
            start, stop = item["outputs"]
            item["outputs"] = descs[start:stop]
        return {"region": self.region.name, "responses": items}

    def _is_ready(self) -> tuple[str, Any]:
        check = getattr(self.model, "is_ready", None)
        try:
            return ("is_ready", True if check is None else bool(_call(check)))
        except Exception as error:  # noqa: BLE001
            return ("is_ready", f"{_describe(error)}")

    def _finalize(self) -> None:
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                _call(self.model.finalize)
        except Exception:  # noqa: BLE001 - unloading goes on regardless
            traceback.print_exc()
        finally:
            self.model = None
            self.reader.close()
            self.region.close()
            self.channel.close()


def _check_decoupled_return(responses: Any) -> None:
    """A decoupled model answers through its senders; execute returns None (or only Nones)."""
    if responses is None:
        return
    if isinstance(responses, list | tuple) and all(r is None for r in responses):
        return
    raise pb_utils.TritonModelException(
        "a decoupled model's execute must return None and send its responses with "
        "request.get_response_sender()"
    )


def autocomplete(model_file: Path, config_in: Path, config_out: Path) -> int:
    try:
        module = load_module(model_file)
        config = pb_utils.ModelConfig(config_in.read_text())
        function = getattr(module.TritonPythonModel, "auto_complete_config", None)
        if function is not None:
            completed = function(config)
            config = completed if completed is not None else config
        config_out.write_text(json.dumps({"config": config.as_dict()}))
        return 0
    except BaseException as error:  # noqa: BLE001 - reported to the parent as text
        traceback.print_exc()
        config_out.write_text(json.dumps({"error": _describe(error)}))
        return 1


def _exit_with_parent() -> None:
    """Exit when the server dies, even while user code is busy (EOF only shows when idle)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                if _out_prefix:
                    shm.unlink_prefixed(_out_prefix)
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    # NOTE: the server tracks (and cleans up) every segment; a tracker here would be one more
    # process per instance, and it would unlink the server's segments when this process exits.
    resource_tracker.register = _no_tracking
    resource_tracker.unregister = _no_tracking
    # NOTE: Ctrl-C reaches the whole process group; the server finalises its instances itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    if argv and argv[0] == "--autocomplete":
        return autocomplete(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    global _out_prefix
    conn = Connection(int(argv[0]))
    _out_prefix = argv[1]
    Stub(conn, _out_prefix).serve()
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
