"""The token table: frozen grants keyed by the sha256 of their key, replaced whole, never edited.

It holds no key, only key hashes, so it may be written down (``table_dumps``) for a replica to
start from while the registry is unreachable.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any


class Need(enum.Enum):
    """What a request needs of a token."""

    OPEN = "open"  # health probes: nothing
    SERVER = "server"  # server metadata and anything not model-specific: a valid token
    EVERY_MODEL = "every_model"  # lists or statistics across models: a token scoped to all
    READ = "read"  # one model's metadata, config, readiness, statistics
    INFER = "infer"  # one model's inference: scope, the right to infer, and quotas


@dataclasses.dataclass(frozen=True, slots=True)
class TokenGrant:
    """What one token may do. ``models`` None: every model. Times are epoch seconds."""

    token_id: int
    prefix: str
    key_hash: str
    models: frozenset[str] | None
    may_infer: bool
    expires_at: float | None = None
    rate_limit_rps: float | None = None
    max_concurrency: int | None = None

    def covers(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclasses.dataclass(frozen=True, slots=True)
class AccessTable:
    """Every token that authenticates at ``revision``."""

    revision: int
    by_hash: Mapping[str, TokenGrant]

    @classmethod
    def of(cls, revision: int, grants: Iterable[TokenGrant]) -> AccessTable:
        return cls(revision, MappingProxyType({g.key_hash: g for g in grants}))


EMPTY_TABLE = AccessTable.of(-1, ())


def table_dumps(table: AccessTable) -> str:
    """``table`` as JSON text: revision, then per token its id, prefix, key hash, scope, expiry
    and quotas (there is no key to write)."""
    tokens = [
        {**dataclasses.asdict(g), "models": None if g.models is None else sorted(g.models)}
        for g in table.by_hash.values()
    ]
    return json.dumps({"revision": table.revision, "tokens": tokens}, sort_keys=True)


def table_loads(text: str) -> AccessTable:
    """The table ``table_dumps`` wrote (``ValueError``/``KeyError``/``TypeError`` if not)."""
    data = json.loads(text)

    def grant(item: dict[str, Any]) -> TokenGrant:
        models = item["models"]
        expires_at, rps, concurrency = (
            item["expires_at"], item["rate_limit_rps"], item["max_concurrency"]
        )  # fmt: skip
        digest = str(item["key_hash"])
        if len(digest) != len(key_hash("")) or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a sha256 key hash: {digest[:8]!r}…")
        return TokenGrant(
            token_id=int(item["token_id"]), prefix=str(item["prefix"]), key_hash=digest,
            models=None if models is None else frozenset(str(m) for m in models),
            may_infer=bool(item["may_infer"]),
            expires_at=None if expires_at is None else float(expires_at),
            rate_limit_rps=None if rps is None else float(rps),
            max_concurrency=None if concurrency is None else int(concurrency),
        )  # fmt: skip

    return AccessTable.of(int(data["revision"]), (grant(item) for item in data["tokens"]))


def key_hash(key: str) -> str:
    """The hash the registry stores for a key (``repository.services.tokens.api_token_hash``).

    Keys are 256 random bits, so an unsalted sha256 is sound and cheap enough for every request.
    """
    return hashlib.sha256(key.encode()).hexdigest()
