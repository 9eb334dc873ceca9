"""Portico's serving process: the KServe v2 / Triton data plane. No Django on the request path."""

import os

# NOTE: grpc's fork handlers restart its poller in a forked child, where subprocess.Popen's
# close_fds closes the poller's epoll descriptor before exec, and the child aborts with EBADF
# (grpc/grpc#43055). Every process this package starts (model processes, front-ends, the
# bubblewrap probe) is a fork followed at once by exec and never uses grpc in between, so the
# handlers are not needed; the variable is grpc's own, read when grpc starts.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
