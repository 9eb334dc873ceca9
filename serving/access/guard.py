"""``AccessGuard``: authenticate a presented key, check its scope, admit it under its quotas.

The hot path is one sha256, one dict lookup in the current (immutable) table and, for inference
under a quota, two counters. The table is swapped by one attribute assignment on the loop.
"""

from __future__ import annotations

import collections
import hmac
import time

from serving.access.errors import PermissionDeniedError, QuotaExceededError, UnauthenticatedError
from serving.access.quotas import QuotaState, has_quota
from serving.access.table import EMPTY_TABLE, AccessTable, Need, TokenGrant, key_hash

_SCHEMES = frozenset(("bearer", "token"))
CONCURRENCY_RETRY_AFTER_S = 1
MAX_VERIFIED = 4096
MISSING = (
    "Unauthenticated: this server requires an inference token "
    "(HTTP 'Authorization: Bearer <token>', gRPC 'authorization' metadata)"
)
INVALID = "Unauthenticated: the inference token is unknown or revoked"


class AccessGuard:
    """Decides every request against the current token table; counts what it refused."""

    def __init__(self, table: AccessTable = EMPTY_TABLE) -> None:
        self.table = EMPTY_TABLE
        self._quotas: dict[int, QuotaState] = {}
        self._used: dict[int, float] = {}
        self._verified: dict[str, TokenGrant] = {}
        self.rejected: collections.Counter[tuple[str, str]] = collections.Counter()
        self.replace(table)

    def replace(self, table: AccessTable) -> None:
        """Serve ``table`` from now on; quota counters of tokens that stay are kept."""
        quotas = {}
        for grant in table.by_hash.values():
            if has_quota(grant):
                state = self._quotas.get(grant.token_id)
                if state is None:
                    state = QuotaState(grant)
                else:
                    state.update(grant)
                quotas[grant.token_id] = state
        # NOTE: one assignment each, on the loop: a request sees the old table or the new one.
        self._quotas = quotas
        self._verified = {}
        self.table = table

    def admit(self, authorization: str | None, need: Need, model: str) -> QuotaState | None:
        """Raise an AccessError, or return the quota state to ``release`` when the request ends
        (None when nothing is held)."""
        if need is Need.OPEN:
            return None
        grant = self._authenticate(authorization)
        try:
            state = self._check(grant, need, model)
        except (PermissionDeniedError, QuotaExceededError) as exc:
            self.rejected[(grant.prefix, exc.reason)] += 1
            raise
        self._used[grant.token_id] = time.time()
        return state

    def admit_stream(self, authorization: str | None) -> QuotaState | None:
        """A stream opens: a valid token, and one concurrency slot for the whole stream."""
        grant = self._authenticate(authorization)
        state = self._quotas.get(grant.token_id)
        if state is None:
            return None
        try:
            self._enter(grant, state)
        except QuotaExceededError as exc:
            self.rejected[(grant.prefix, exc.reason)] += 1
            raise
        self._used[grant.token_id] = time.time()
        return state

    def admit_message(self, authorization: str | None, model: str) -> None:
        """One message of an open stream: scope, the right to infer, and the rate."""
        grant = self._authenticate(authorization)
        try:
            self._check(grant, Need.READ, model)
            self._may_infer(grant)
            state = self._quotas.get(grant.token_id)
            if state is not None:
                self._take_rate(grant, state)
        except (PermissionDeniedError, QuotaExceededError) as exc:
            self.rejected[(grant.prefix, exc.reason)] += 1
            raise
        self._used[grant.token_id] = time.time()

    def release(self, state: QuotaState) -> None:
        state.leave()

    def take_usage(self) -> dict[int, float]:
        """When each token was last used since the previous call (token id -> epoch seconds)."""
        used, self._used = self._used, {}
        return used

    def _authenticate(self, authorization: str | None) -> TokenGrant:
        # Headers already verified against this table skip parsing and hashing; only verified
        # ones are kept (so at most a few per token), and the cache empties with every table.
        grant = self._verified.get(authorization) if authorization else None
        if grant is None:
            grant = self._verify(authorization)
            if len(self._verified) >= MAX_VERIFIED:
                self._verified.clear()
            self._verified[authorization or ""] = grant
        if grant.expires_at is not None and time.time() >= grant.expires_at:
            self.rejected[(grant.prefix, "expired")] += 1
            raise UnauthenticatedError(
                f"Unauthenticated: the inference token {grant.prefix}… expired", reason="expired"
            )
        return grant

    def _verify(self, authorization: str | None) -> TokenGrant:
        key = _key(authorization)
        if key is None:
            self.rejected[("", "unauthenticated")] += 1
            raise UnauthenticatedError(MISSING, reason="unauthenticated")
        digest = key_hash(key)
        grant = self.table.by_hash.get(digest)
        # NOTE: the lookup is by digest (a client chooses its key, not the key's sha256, so its
        # timing teaches nothing); the comparison that admits is constant-time.
        if grant is None or not hmac.compare_digest(grant.key_hash, digest):
            self.rejected[("", "unauthenticated")] += 1
            raise UnauthenticatedError(INVALID, reason="unauthenticated")
        return grant

    def _check(self, grant: TokenGrant, need: Need, model: str) -> QuotaState | None:
        if need is Need.SERVER:
            return None
        if need is Need.EVERY_MODEL:
            if grant.models is not None:
                raise PermissionDeniedError(
                    "Permission denied: this needs a token for every model; "
                    f"token {grant.prefix}… is scoped to {', '.join(sorted(grant.models))}",
                    reason="forbidden",
                )
            return None
        if not grant.covers(model):
            raise PermissionDeniedError(
                f"Permission denied: token {grant.prefix}… may not use model '{model}'",
                reason="forbidden",
            )
        if need is Need.READ:
            return None
        self._may_infer(grant)
        state = self._quotas.get(grant.token_id)
        if state is None:
            return None
        self._take_rate(grant, state)
        self._enter(grant, state)
        return state

    def _may_infer(self, grant: TokenGrant) -> None:
        if not grant.may_infer:
            raise PermissionDeniedError(
                f"Permission denied: token {grant.prefix}… may read models but not call them",
                reason="forbidden",
            )

    def _take_rate(self, grant: TokenGrant, state: QuotaState) -> None:
        wait_s = state.take_rate()
        if wait_s:
            raise QuotaExceededError(
                f"Quota exceeded: token {grant.prefix}… may send {grant.rate_limit_rps:g} "
                "requests per second",
                reason="quota_rate",
                retry_after_s=wait_s,
            )

    def _enter(self, grant: TokenGrant, state: QuotaState) -> None:
        if not state.enter():
            raise QuotaExceededError(
                f"Quota exceeded: token {grant.prefix}… may have {grant.max_concurrency} "
                "requests in flight",
                reason="quota_concurrency",
                retry_after_s=CONCURRENCY_RETRY_AFTER_S,
            )


def _key(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    key = key.strip()
    if scheme.lower() not in _SCHEMES or not key:
        return None
    return key
