"""The bubblewrap command line around the check: namespaces, mounts, scratch, then the check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from repository.sandbox.limits import CheckLimits
from repository.sandbox.mounts import gpu_mounts, python_mounts, source_files, system_mounts
from repository.sandbox.policy import SandboxPolicy

# Where things appear inside the sandbox.
SOURCE_ROOT = "/portico/src"
INPUT_ROOT = "/portico/input"
SCRATCH = "/scratch"
HOME = f"{SCRATCH}/home"
TMP = f"{SCRATCH}/tmp"
NOBODY = "65534"


@dataclasses.dataclass(frozen=True)
class SandboxLayout:
    """The host side of one check: the source root and the folder holding this version's copy
    (mounted read-only at ``INPUT_ROOT``); ``inside`` maps a host path under it to the sandbox."""

    base_dir: Path
    input_dir: Path
    check_module: str

    def inside(self, host_path: Path) -> str:
        return f"{INPUT_ROOT}/{host_path.relative_to(self.input_dir).as_posix()}"


def sandboxed_argv(
    *, policy: SandboxPolicy, limits: CheckLimits, layout: SandboxLayout, argv: list[str]
) -> list[str]:
    """``argv`` wrapped in bwrap: no network (loopback included), its own PID, IPC, UTS, user
    and mount namespaces, killed with its parent, no controlling terminal."""
    return [
        str(policy.bwrap_path),
        "--unshare-all",
        "--unshare-user",
        "--uid",
        NOBODY,
        "--gid",
        NOBODY,
        "--hostname",
        "portico-check",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *system_mounts(),
        # NOTE: /tmp before the interpreter: a virtualenv under /tmp is then bound on top of it.
        *_sized_tmpfs("/tmp", limits.scratch_bytes),
        *python_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *gpu_mounts(),
        *_scratch(limits.scratch_bytes),
        *_sources(layout),
        "--ro-bind",
        str(layout.input_dir),
        INPUT_ROOT,
        # NOTE: bwrap builds the new root on a tmpfs of its own; read-only, it cannot become an
        # unbounded place to write (scratch, /tmp and /dev/shm are separate, sized mounts).
        "--remount-ro",
        "/",
        "--chdir",
        SCRATCH,
        "--",
        *argv,
    ]


def _scratch(size_bytes: int) -> list[str]:
    """Size-bounded tmpfs folders: with /tmp, the only writable places (home, shared memory)."""
    return [
        *_sized_tmpfs(SCRATCH, size_bytes),
        "--dir",
        HOME,
        "--dir",
        TMP,
        *_sized_tmpfs("/dev/shm", size_bytes),
    ]


def _sized_tmpfs(path: str, size_bytes: int) -> list[str]:
    size = ["--size", str(size_bytes)] if size_bytes > 0 else []
    return [*size, "--tmpfs", path]


def _sources(layout: SandboxLayout) -> list[str]:
    args: list[str] = []
    for path in source_files(layout.base_dir, layout.check_module):
        inner = f"{SOURCE_ROOT}/{path.relative_to(layout.base_dir).as_posix()}"
        args += ["--ro-bind", str(path), inner]
    return args
