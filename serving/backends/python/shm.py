"""Tensors through shared memory between the server and a Python model's process.

Each side owns one growable region per direction (the server writes inputs, the model's process
writes outputs); only small descriptors ``(name, datatype, shape, offset, nbytes)`` travel over the
control pipe. BYTES tensors are serialised as Triton does (4-byte little-endian length, then the
bytes). Region names start with the instance's prefix (``portico_<server pid>_<id>_``) so a crashed
process's leftovers can be found and unlinked, and a server starting sweeps what servers that died
(even by SIGKILL) left behind. Imports only numpy and the standard library: the model's process
loads it first.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import uuid
from collections.abc import Iterable
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from serving.core.datatypes import NUMPY_BY_WIRE, WIRE_BY_NUMPY

TensorDesc = tuple[str, str, tuple[int, ...], int, int]  # name, datatype, shape, offset, nbytes

_ALIGN_BYTES = 64
_MIN_REGION_BYTES = 1 << 20
_SHM_DIR = Path("/dev/shm")
_PREFIX = "portico_"
_SERVER_PID = re.compile(rf"{_PREFIX}(\d+)_")


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The dtype of a tensor descriptor's datatype (one this module wrote itself)."""
    return NUMPY_BY_WIRE[datatype]


def wire_datatype(array: np.ndarray[Any, Any]) -> str:
    dtype = array.dtype
    wire = WIRE_BY_NUMPY.get(dtype)
    if wire is not None:
        return wire
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    raise TypeError(f"unsupported numpy dtype {dtype}")


def serialize_bytes(array: np.ndarray[Any, Any]) -> bytes:
    """Triton's BYTES layout: each element as <uint32 length><bytes>, row-major."""
    parts = []
    for item in array.ravel(order="C"):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: bytes | memoryview, count: int) -> np.ndarray[Any, Any]:
    items: list[bytes] = []
    offset = 0
    view = memoryview(buffer)
    for _ in range(count):
        (length,) = struct.unpack_from("<I", view, offset)
        items.append(bytes(view[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def untrack(name: str) -> None:
    """Keep the stdlib's resource tracker out of a segment another process owns (Python < 3.13)."""
    with contextlib.suppress(Exception):  # the tracker may not know it
        resource_tracker.unregister("/" + name.lstrip("/"), "shared_memory")


class Region:
    """A growable shared memory segment owned by one side; the other side attaches by name."""

    def __init__(self, prefix: str, *, track: bool = True) -> None:
        self.prefix = prefix
        self.track = track
        self._generation = 0
        self._shm: shared_memory.SharedMemory | None = None

    @property
    def name(self) -> str:
        return self._shm.name if self._shm is not None else ""

    def write(self, tensors: Iterable[tuple[str, np.ndarray[Any, Any]]]) -> list[TensorDesc]:
        """Lay tensors out in the region (growing it if needed); returns their descriptors."""
        payloads: list[tuple[str, str, tuple[int, ...], Any, int]] = []
        total = 0
        for name, array in tensors:
            datatype = wire_datatype(array)
            if datatype == "BYTES":
                data: Any = serialize_bytes(array)
                nbytes = len(data)
            else:
                data = np.ascontiguousarray(array)
                nbytes = data.nbytes
            payloads.append((name, datatype, tuple(int(d) for d in array.shape), data, nbytes))
            total += _aligned(nbytes)
        shm = self._ensure(total)
        descs: list[TensorDesc] = []
        offset = 0
        for name, datatype, shape, data, nbytes in payloads:
            if isinstance(data, bytes):
                _buf(shm)[offset : offset + nbytes] = data
            elif nbytes:
                target = np.ndarray(data.shape, dtype=data.dtype, buffer=_buf(shm), offset=offset)
                target[...] = data
                del target
            descs.append((name, datatype, shape, offset, nbytes))
            offset += _aligned(nbytes)
        return descs

    def close(self) -> None:
        """Close and unlink the current segment."""
        if self._shm is not None:
            _close(self._shm, unlink=True)
            self._shm = None

    def _ensure(self, size: int) -> shared_memory.SharedMemory:
        # NOTE: grows by replacing the segment (new name); the reader re-attaches by name.
        if self._shm is not None and self._shm.size >= size:
            return self._shm
        self.close()
        capacity = max(_MIN_REGION_BYTES, 1 << max(size - 1, 1).bit_length())
        self._generation += 1
        name = f"{self.prefix}{self._generation}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=capacity)
        if not self.track:
            untrack(self._shm.name)
        return self._shm


class Reader:
    """Attach to the peer's region by name (re-attaching when it grew) and read tensors out."""

    def __init__(self, *, track: bool = True) -> None:
        self.track = track
        self._shm: shared_memory.SharedMemory | None = None

    def read(self, region: str, descs: Iterable[TensorDesc]) -> dict[str, np.ndarray[Any, Any]]:
        shm = self._attach(region)
        out: dict[str, np.ndarray[Any, Any]] = {}
        for name, datatype, shape, offset, nbytes in descs:
            count = int(np.prod(shape)) if shape else 1
            if datatype == "BYTES":
                view = _buf(shm)[offset : offset + nbytes]
                out[name] = deserialize_bytes(view, count).reshape(shape)
                view.release()
            else:
                dtype = numpy_dtype(datatype)
                out[name] = (
                    np.frombuffer(_buf(shm), dtype=dtype, count=count, offset=offset)
                    .reshape(shape)
                    .copy()
                )
        return out

    def close(self) -> None:
        if self._shm is not None:
            _close(self._shm, unlink=False)
            self._shm = None

    def _attach(self, region: str) -> shared_memory.SharedMemory:
        if self._shm is not None and self._shm.name == region:
            return self._shm
        self.close()
        self._shm = shared_memory.SharedMemory(name=region, create=False)
        if not self.track:
            untrack(self._shm.name)
        return self._shm


def instance_prefix() -> str:
    """A new instance's segment prefix; it names this server's pid for ``sweep_dead_servers``."""
    return f"{_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}_"


def sweep_dead_servers() -> list[str]:
    """Unlink every segment whose server pid no longer runs; returns the names removed."""
    removed: list[str] = []
    if not _SHM_DIR.is_dir():
        return removed
    for path in _SHM_DIR.glob(_PREFIX + "*"):
        match = _SERVER_PID.match(path.name)
        if match is None or _running(int(match.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def unlink_prefixed(prefix: str) -> list[str]:
    """Unlink every segment whose name starts with ``prefix`` (what a crashed process left)."""
    removed: list[str] = []
    if not _SHM_DIR.is_dir():
        return removed
    for path in _SHM_DIR.glob(prefix + "*"):
        try:
            os.unlink(path)
            removed.append(path.name)
        except FileNotFoundError:
            pass
    return removed


def leftover(prefix: str) -> list[str]:
    """Names of segments starting with ``prefix`` that still exist."""
    if not _SHM_DIR.is_dir():
        return []
    return sorted(p.name for p in _SHM_DIR.glob(prefix + "*"))


def _buf(segment: shared_memory.SharedMemory) -> memoryview:
    buffer = segment.buf
    assert buffer is not None, "shared memory segment is closed"
    return buffer


def _aligned(size: int) -> int:
    return (size + _ALIGN_BYTES - 1) // _ALIGN_BYTES * _ALIGN_BYTES


def _close(shm: shared_memory.SharedMemory, *, unlink: bool) -> None:
    with contextlib.suppress(BufferError):  # a view still alive; the mapping goes with the process
        shm.close()
    if unlink:
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()
