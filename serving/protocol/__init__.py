"""The protocol edges: KServe v2 over HTTP and gRPC, decoding into the core's request types."""
