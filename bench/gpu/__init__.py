"""The one-shot GPU device check: ``python -m bench.gpu`` (``make gpu-check``).

On a machine with an NVIDIA GPU it makes its own venv from requirements-gpu.lock, runs every test
marked ``gpu`` there (a skip counts as a failure), then measures Portico's served throughput and
p99 beside raw in-process ONNX Runtime (CUDA and TensorRT providers) on generated models and
writes the GPU section of docs/benchmarks.md, each phase within its own time budget so that one
run finishes in under eight minutes. Without a GPU it stops at once, saying why.
"""
