"""Reading approvals: which files a version holds now, whether they are the ones approved, and
who may not approve it.

Every file of a code-bearing version counts as code: ``model.py`` can import, unpickle or execute
any file beside it, so an approval covers them all. A file row names its blob by the content's
sha256 (and serving checks each blob against it when it materialises one), so the rows' hashes
are the code's.
"""

from __future__ import annotations

from typing import Any

from repository.models import ModelVersion


def model_version_code(*, version: ModelVersion) -> dict[str, dict[str, str]]:
    """``{"files": {path: sha256}, "model_files": {path: sha256}}`` of the files ``version``
    holds now (reads ``files.all()``, so a prefetch of ``files`` serves it)."""
    code: dict[str, dict[str, str]] = {"files": {}, "model_files": {}}
    for f in version.files.all():
        code["model_files" if f.model_level else "files"][f.path] = f.blob_id
    return code


def model_version_code_changes(*, version: ModelVersion) -> list[str]:
    """The paths whose content differs from what was approved (added, removed or changed);
    empty for a version that needs no approval. Model-level paths start with ``../``."""
    if not version.needs_approval:
        return []
    now, approved = model_version_code(version=version), version.approved_code or {}
    changed = []
    for kind, prefix in (("files", ""), ("model_files", "../")):
        held, granted = now[kind], approved.get(kind) or {}
        changed += [
            prefix + p for p in sorted(set(held) | set(granted)) if held.get(p) != granted.get(p)
        ]
    return changed


def model_version_excluded_approvers(*, version: ModelVersion) -> set[int]:
    """Ids of the users who may not approve ``version``: its uploader and everyone who uploaded
    any of its files (reads ``code_uploaders.all()``, so a prefetch serves it)."""
    excluded = {u.pk for u in version.code_uploaders.all()}
    if version.uploaded_by_id is not None:
        excluded.add(version.uploaded_by_id)
    return excluded


def user_may_approve(*, version: ModelVersion, user: Any) -> bool:
    """Whether ``user`` is a second person for ``version`` (the role is checked elsewhere)."""
    return user is not None and user.pk not in model_version_excluded_approvers(version=version)
