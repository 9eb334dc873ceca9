"""The token table: frozen grants keyed by the sha256 of their key, replaced whole, never edited."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType


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


def key_hash(key: str) -> str:
    """The hash the registry stores for a key (``repository.services.tokens.api_token_hash``).

    Keys are 256 random bits, so an unsalted sha256 is sound and cheap enough for every request.
    """
    return hashlib.sha256(key.encode()).hexdigest()
