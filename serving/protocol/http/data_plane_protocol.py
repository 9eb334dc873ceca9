"""uvicorn's httptools protocol with what the data plane adds to each request's scope: a
``DisconnectWatch`` that the protocol tells when the connection is lost (so ``until_disconnect``
needs no task of its own per request), and a ``WholeAnswer`` that writes a complete answer in
one write."""

from __future__ import annotations

import asyncio
import collections

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from serving.protocol.http.disconnect import DisconnectWatch, attach_disconnect_watch
from serving.protocol.http.whole_answer import attach_whole_answer


class DataPlaneProtocol(HttpToolsProtocol):
    """Every request gets a watch and a whole-answer writer in its scope; a lost connection tells
    the watches of the requests not yet answered."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._unanswered: collections.deque[DisconnectWatch] = collections.deque()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.scope is self.scope:  # not for an upgrade
            # NOTE: answers leave in request order (pipelined requests wait their turn), so the
            # oldest watch is the one whose answer completes next.
            self._unanswered.append(attach_disconnect_watch(self.scope))  # type: ignore[arg-type]
            attach_whole_answer(self.scope, self.cycle)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        if self._unanswered:
            self._unanswered.popleft()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        while self._unanswered:
            self._unanswered.popleft().lost()
