"""The transports' own cost: an echo "identity" model behind the stock HTTP and gRPC stacks.

`python -m bench.transport_floor --http-port N --grpc-port M` serves one model, ``identity``
(FP32 ``INPUT0`` -> ``OUTPUT0``), over stock uvicorn (its httptools protocol, uvloop, a raw ASGI
app) and stock grpc.aio on the same loop. Each request's tensor is echoed with no scheduler,
backend, statistics or checks. Portico's latency minus this floor, measured in the same run by
the same load generator, is what Portico adds above a server built plainly on these libraries.

It is a reference, not a bound: Portico's HTTP listener runs its own connection protocol on
httptools (``serving/protocol/http/connection.py``), cheaper than uvicorn's, and its gRPC port is
served by its own HTTP/2 listener on the ``jh2`` library (``serving/protocol/grpc/http2_*``; with
``--grpc-transport grpcio``, grpc.aio pre-registering only the inference RPCs), so what the floor
spends and what Portico spends are not the same work. The floor stays stock so that such
differences show in the tables instead of moving the floor with them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import grpc
import orjson
import uvicorn
import uvloop
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

MODEL = "identity"
TENSOR = {"datatype": "FP32", "shape": [-1, -1]}
METADATA = {
    "name": MODEL, "versions": ["1"], "platform": "onnxruntime_onnx",
    "inputs": [{"name": "INPUT0", **TENSOR}], "outputs": [{"name": "OUTPUT0", **TENSOR}],
}  # fmt: skip
CONFIG = {
    "name": MODEL, "platform": "onnxruntime_onnx", "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}  # fmt: skip
HEADER_LENGTH = b"inference-header-content-length"


async def echo_http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The KServe v2 routes perf_analyzer calls, with the binary tensor extension on infer."""
    if scope["type"] != "http":
        return
    path = scope["path"].rstrip("/")
    if scope["method"] == "POST" and path == f"/v2/models/{MODEL}/infer":
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        header_length = int(headers.get(HEADER_LENGTH, len(body)))
        request = orjson.loads(body[:header_length])
        tensor = body[header_length:]
        shape = request["inputs"][0]["shape"]
        header = orjson.dumps({
            "model_name": MODEL, "model_version": "1", "id": request.get("id", ""),
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": shape,
                         "parameters": {"binary_data_size": len(tensor)}}],
        })  # fmt: skip
        extra = [(b"inference-header-content-length", str(len(header)).encode())]
        await _reply(send, header + tensor, "application/octet-stream", extra)
        return
    document = {
        "/v2": {"name": "floor", "version": "1", "extensions": []},
        f"/v2/models/{MODEL}": METADATA,
        f"/v2/models/{MODEL}/config": CONFIG,
        "/v2/health/ready": {},
        "/v2/health/live": {},
    }.get(path)
    if document is None:
        await _reply(send, b'{"error":"not found"}', "application/json", [], status=404)
    else:
        await _reply(send, orjson.dumps(document), "application/json", [])


async def _reply(
    send: Any, body: bytes, content_type: str, extra: list[tuple[bytes, bytes]], status: int = 200
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})


class EchoService(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """The gRPC RPCs perf_analyzer calls; ModelInfer echoes the raw input contents."""

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=True)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(name="floor", version="1")

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        response = service_pb2.ModelMetadataResponse(
            name=MODEL, versions=["1"], platform="onnxruntime_onnx"
        )
        response.inputs.add(name="INPUT0", **TENSOR)
        response.outputs.add(name="OUTPUT0", **TENSOR)
        return response

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        config = model_config_pb2.ModelConfig(
            name=MODEL, platform="onnxruntime_onnx", max_batch_size=8
        )
        config.input.add(name="INPUT0", data_type=model_config_pb2.TYPE_FP32, dims=[-1])
        config.output.add(name="OUTPUT0", data_type=model_config_pb2.TYPE_FP32, dims=[-1])
        return service_pb2.ModelConfigResponse(config=config)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        response = service_pb2.ModelInferResponse(
            model_name=MODEL, model_version="1", id=request.id
        )
        response.outputs.add(name="OUTPUT0", datatype="FP32", shape=request.inputs[0].shape)
        response.raw_output_contents.extend(request.raw_input_contents[:1])
        return response


async def serve(http_port: int, grpc_port: int) -> None:
    grpc_server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(EchoService(), grpc_server)
    grpc_server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await grpc_server.start()
    config = uvicorn.Config(
        echo_http, host="127.0.0.1", port=http_port, http="httptools", lifespan="off",
        access_log=False, log_config=None, server_header=False,
    )  # fmt: skip
    await uvicorn.Server(config).serve()
    await grpc_server.stop(grace=1)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.transport_floor")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.http_port, args.grpc_port))


if __name__ == "__main__":
    main(sys.argv[1:])
