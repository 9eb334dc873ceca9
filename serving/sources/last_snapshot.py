"""The last registry snapshot a replica applied, and its token table, kept next to its blob cache.

A replica restarted while the database is down starts from them: its cache holds every blob the
snapshot names, so it serves what it served before, to the tokens it accepted before (the table
holds key hashes, never keys), and catches up once the database answers. Only a configured cache
folder (``--cache-dir``, a volume that outlives the process) keeps them; the private temporary cache
of a replica without one is removed when it stops, so there is nothing to start from. Each file is
replaced atomically (a crash mid-write leaves the previous one) and only this user may read or
write it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

SNAPSHOT_NAME = "registry-snapshot.json"
ACCESS_NAME = "access-snapshot.json"


def snapshot_write(folder: Path, text: str, name: str = SNAPSHOT_NAME) -> None:
    """Replace ``folder``'s kept ``name`` with ``text``: written whole, synced, then renamed."""
    # NOTE: mkstemp creates the file 0600, and in the same folder, so the rename is atomic.
    fd, partial = tempfile.mkstemp(dir=folder, prefix=".snapshot-", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def snapshot_read(folder: Path, name: str = SNAPSHOT_NAME) -> str | None:
    """The kept file's text, or None when this folder has none."""
    try:
        return (folder / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
