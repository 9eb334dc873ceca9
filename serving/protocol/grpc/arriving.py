"""The request-bytes budget (``--max-in-flight-request-bytes``) for a unary call's message while
it arrives, on the listeners that read gRPC's framing themselves (h2corn's and ``h2``).

The budget counts a gRPC request by its decoded inputs, which exist only once its message is
whole. A large message arrives over many reads, and until its last byte it was held outside the
budget: with the budget spent, clients could still upload message after message, each refused
only once it had all arrived. HTTP counts a body by its ``Content-Length`` before reading it;
the same holds here for a message by its length prefix: a unary call whose message would take
the requests being served past the budget ends ``UNAVAILABLE`` as soon as its first five bytes
are in, before the client sends the rest. Its share is given back once the message is whole,
when the handler counts the decoded inputs instead (``RequestBytesBudget.take_inputs``).

Only unary calls: a refused message on a stream could not be answered in-band (its model and
request id are in the bytes not read), and ending the stream would end its other requests too,
so a streamed request is counted once decoded and refused in-band, the stream going on. A
message that arrives in one read is never held across reads and costs nothing here.
"""

from __future__ import annotations

from serving.core.request_bytes import RequestBytesBudget
from serving.errors import OverloadedError
from serving.protocol.grpc import http2_wire as wire


class ArrivingMessages:
    """One listener's view of the budget: each call keeps its own share (an int) and hands it to
    ``recount`` whenever its partial message changes."""

    __slots__ = ("_budget",)

    def __init__(self, budget: RequestBytesBudget) -> None:
        self._budget = budget

    @classmethod
    def of(cls, budget: RequestBytesBudget | None) -> ArrivingMessages | None:
        """None where there is no budget to count against (none set, or a front-end process,
        whose budget lives in the serving process)."""
        return cls(budget) if budget is not None and budget.limit else None

    def recount(self, share: int, partial: bytes | bytearray | None) -> int:
        """The share of the message whose start is ``partial`` (its declared length; 0 while
        its prefix is incomplete or nothing is arriving), ``share`` given back first. Raises
        ``WireError`` UNAVAILABLE past the budget, with ``share`` already given back."""
        wanted = 0
        if partial is not None and len(partial) >= wire.PREFIX_BYTES:
            wanted = wire.MESSAGE_PREFIX.unpack_from(partial)[1]
        if wanted == share:
            return share
        if share:
            self._budget.give_back(share)
        if not wanted:
            return 0
        try:
            return self._budget.take(wanted)
        except OverloadedError as exc:
            raise wire.WireError(wire.UNAVAILABLE, exc.message) from None
