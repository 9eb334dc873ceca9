"""What the sandbox can see: the system libraries, the interpreter and virtualenv, and the few
source modules the check imports, all read-only. Nothing else of the host is mounted: not the
source tree (settings, ``var/``, ``.git``, ``.env``), not the database file, the blob store,
other versions or ``$HOME``."""

from __future__ import annotations

import glob
import sys
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Enough of /etc for the dynamic loader and for libraries that look up the current user.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
)
# CPU topology: the runtimes size their thread pools from it.
SYS_FILES = ("/sys/devices/system/cpu",)
# The packages the check imports, relative to the source root (the registry's config package is
# the only part of the registry that serving depends on).
CHECK_SOURCES = ("serving", "repository/__init__.py", "repository/config")


def system_mounts() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
        host = Path(path)
        if host.is_symlink():
            args += ["--symlink", str(host.readlink()), path]
        elif host.is_dir():
            args += ["--ro-bind", path, path]
    for path in (*ETC_FILES, *SYS_FILES):
        args += ["--ro-bind-try", path, path]
    return args


def python_mounts() -> list[str]:
    """The interpreter's installation and the virtualenv, at their own paths, read-only."""
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix)}
    roots.add(Path(sys.executable).resolve().parent.parent)
    args: list[str] = []
    for root in sorted(roots):
        if not _under_system_dir(root):
            args += ["--ro-bind", str(root), str(root)]
    return args


def gpu_mounts() -> list[str]:
    """NVIDIA device nodes, when the host has them, so TensorRT and CUDA models can be checked."""
    args: list[str] = []
    for node in sorted(glob.glob("/dev/nvidia*")):
        args += ["--dev-bind", node, node]
    return args


def source_files(base_dir: Path, check_module: str) -> list[Path]:
    """Paths under ``base_dir`` the check needs: serving, the config package and the module
    named by the check-module setting (with its packages' ``__init__.py`` files)."""
    wanted = [base_dir / rel for rel in CHECK_SOURCES]
    parts = check_module.split(".")
    for depth in range(1, len(parts)):
        wanted.append(base_dir.joinpath(*parts[:depth], "__init__.py"))
    module = base_dir.joinpath(*parts)
    wanted.append(module if module.is_dir() else module.with_suffix(".py"))
    return _without_covered([p for p in wanted if p.exists()])


def _without_covered(paths: list[Path]) -> list[Path]:
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _under_system_dir(path: Path) -> bool:
    return any(path.is_relative_to(d) for d in SYSTEM_DIRS if Path(d).is_dir())
