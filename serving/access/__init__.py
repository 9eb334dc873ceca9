"""Inference access: who may call what on serving, and how fast.

One layer every listener passes through (``http.AccessMiddleware`` in front of the HTTP app,
``grpc.AccessInterceptor`` on the gRPC server), both asking one ``guard.AccessGuard``. The guard
holds an immutable ``table.AccessTable`` of token hashes, scopes, expiries and quotas that the
registry source swaps whole when the registry's revision moves; no Django on the request path.
Folder mode, and registry mode with ``PORTICO_INFERENCE_AUTH=off``, install none of it.
"""
