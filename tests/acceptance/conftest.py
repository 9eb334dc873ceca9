"""Acceptance suite: Triton's own client examples and QA checks against a real ``serve`` process.

Every test talks to the server only through ``tritonclient`` (or raw HTTP where Triton's QA tests
do), exactly as an existing Triton user would; nothing here imports the server's code. Each module
starts one server (module-scoped fixture) on a freshly generated example repository.
"""
