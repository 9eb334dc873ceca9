"""``config.pbtxt``: parse, validate, auto-complete, normalise and print Triton's ModelConfig.

Pure Python (protobuf + tritonclient's generated ``model_config_pb2``); no Django. The serving
process imports this package.
"""
