"""The last-known registry snapshot kept in a replica's cache folder: private, replaced whole."""

from __future__ import annotations

import stat
from pathlib import Path

from serving.sources.last_snapshot import SNAPSHOT_NAME, snapshot_read, snapshot_write


def test_a_folder_without_a_snapshot_reads_none(tmp_path: Path) -> None:
    assert snapshot_read(tmp_path) is None


def test_snapshot_is_replaced_whole_and_readable_only_by_its_owner(tmp_path: Path) -> None:
    snapshot_write(tmp_path, '{"revision": 1}')
    snapshot_write(tmp_path, '{"revision": 2}')
    assert snapshot_read(tmp_path) == '{"revision": 2}'
    assert stat.S_IMODE((tmp_path / SNAPSHOT_NAME).stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [SNAPSHOT_NAME]  # no partial file left
