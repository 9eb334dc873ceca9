"""Portico's serving process: the KServe v2 / Triton data plane. No Django on the request path."""
