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
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.errors import UnavailableError

logger = logging.getLogger("serving.sources.registry")

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


def last_known_snapshot(folder: Path | None, error: Exception, loads: Callable[[str], Any]) -> Any:
    """The registry did not answer at start-up (``error``): the snapshot an earlier run kept in
    ``folder`` (None: no configured cache folder), read with ``loads``. ``UnavailableError`` when
    there is none or it is unreadable: nothing to serve, the replica exits for its supervisor to
    start it again."""
    text = None if folder is None else snapshot_read(folder)
    if text is None:
        kept = "no --cache-dir" if folder is None else f"none in {folder}"
        raise UnavailableError(
            f"the registry is unreachable ({error}) and there is no last-known snapshot to "
            f"start from ({kept})"
        ) from error
    try:
        snapshot = loads(text)
    except (ValueError, KeyError, TypeError) as bad:
        raise UnavailableError(
            f"the registry is unreachable ({error}) and the last-known snapshot in {folder} is "
            f"unreadable ({bad!r})"
        ) from error
    logger.warning("the registry is unreachable (%s); serving the last-known snapshot "
                   "(revision %s) until it answers", error, snapshot.revision)  # fmt: skip
    return snapshot
