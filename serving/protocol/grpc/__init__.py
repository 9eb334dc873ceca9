"""gRPC ``inference.GRPCInferenceService`` on grpc.aio, with tritonclient's generated servicer."""
