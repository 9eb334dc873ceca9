"""Where a request's answer can be written whole, in one write (``Exchange.write_whole``).

The data plane's connection (``serving.protocol.http.connection``) puts each request's
``Exchange`` in its scope under ``WHOLE_ANSWER_EXTENSION``; the infer path, and an HTTP front-end
relaying an answer the serving process sent back whole, look it up with ``whole_answer``. Behind
any other ASGI server there is none, and answers go through ``send``.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from serving.protocol.http.exchange import Exchange

WHOLE_ANSWER_EXTENSION = "portico.whole_answer"
# Larger answers go through ``send`` in pieces: copying them into one write would cost more than
# the system call it saves.
WHOLE_ANSWER_BYTES = 64 * 1024


def whole_answer(scope: MutableMapping[str, Any]) -> Exchange | None:
    """The request's exchange, where its listener offers one (not behind a front-end relay)."""
    extensions = scope.get("extensions")
    return extensions.get(WHOLE_ANSWER_EXTENSION) if extensions else None
