"""The messages between two nodes: the exchange, a restarted node's recovery, the goodbyes.

:class:`Request`, answered by a :class:`Reply` (the jump's flow), a :class:`Busy` (refused:
try again later) or a :class:`Nack` (never applied: closed or recovering); :class:`LedgerRequest`
and :class:`LedgerReply` (a restarted node's recovery), :class:`Moved` (its new address) and
:class:`Done` (a stopping node's goodbye, :mod:`gossip.exchange.parting`). The protocol is
:mod:`gossip.exchange.exchanger`'s; each class says what it carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from continuized.gossip.wire.checks import (
    Floats,
    Vector,
)

__all__ = ["Busy", "Done", "LedgerReply", "LedgerRequest", "Moved", "Nack", "Reply", "Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """Initiator -> server: please run exchange ``(edge, seq)`` at time ``t``; my exchanged
    value at ``t`` is ``u``.

    ``ack`` is the initiator's watermark on this edge: every exchange with a sequence number
    ``<= ack`` is resolved on its side, so the server may forget their cached answers.
    ``z``, if given, is the initiator's second variable at ``t`` (``u`` is then its ``x``): the
    server may *move* the jump to its own later time, mixing ``(u, z)`` there in closed form.
    ``served`` is the highest ``seq`` of the *server's* requests on this edge the initiator had
    answered when it read ``u`` and ``z``: the server's exchanges that ``u`` already includes
    (:mod:`gossip.exchange.exchanger`, crossing requests).
    """

    TYPE: ClassVar[str] = "request"
    src: int
    edge: int
    seq: int
    ack: int
    t: float
    u: Vector
    z: Vector | None = None
    served: int = 0


@dataclass(frozen=True, slots=True)
class Reply:
    """Server -> initiator: exchange ``(edge, seq)`` happened at its time ``t`` (the request's,
    or a later one if the request let the server move it).

    ``(dx, dz)`` flows into the initiator; the server has applied ``(-dx, -dz)`` at ``t``.
    ``wall`` is the server's wall clock (Unix seconds) when it answered: with the request's
    send and the reply's arrival times, the initiator bounds the two clocks' offset
    (:mod:`gossip.exchange.clockskew`); ``0.0``: not said.
    """

    TYPE: ClassVar[str] = "reply"
    src: int
    edge: int
    seq: int
    t: float
    dx: Vector
    dz: Vector
    wall: float = 0.0


@dataclass(frozen=True, slots=True)
class Busy:
    """Server -> initiator: exchange ``(edge, seq)`` was refused, not applied and never will be.

    The server was in an exchange of its own, or had already jumped at time ``t`` later than
    the request's. The initiator tries the activation again later, at a time ``>= t``.
    """

    TYPE: ClassVar[str] = "busy"
    src: int
    edge: int
    seq: int
    t: float


@dataclass(frozen=True, slots=True)
class Nack:
    """Server -> initiator: exchange ``(edge, seq)`` was not applied and never will be."""

    TYPE: ClassVar[str] = "nack"
    src: int
    edge: int
    seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class LedgerRequest:
    """Node -> neighbour: send me your cumulative flow on ``edge``."""

    TYPE: ClassVar[str] = "ledger_request"
    src: int
    edge: int


@dataclass(frozen=True, slots=True)
class LedgerReply:
    """Neighbour -> node: my cumulative flow ``(fx, fz)`` on ``edge``, mixed to my time ``t``.

    ``seq`` is the highest exchange sequence number the neighbour has seen from the requester on
    that edge, so that a restarted requester numbers its next exchanges above it. Every
    exchange the neighbour started on the edge numbered ``<= settled`` is settled: the flow
    holds its jump if it had one (a request's ``served`` counts from there).
    """

    TYPE: ClassVar[str] = "ledger_reply"
    src: int
    edge: int
    seq: int
    t: float
    fx: Floats
    fz: Floats
    settled: int = 0


@dataclass(frozen=True, slots=True)
class Moved:
    """Node -> neighbour: reach me at ``address`` (``tcp://host:port``) on ``edge`` from now on.

    Sent by a restarted node, which may have come back on another address, before each of its
    LedgerRequests. It changes only where the neighbour sends its requests, never the state.
    """

    TYPE: ClassVar[str] = "moved"
    src: int
    edge: int
    address: str


@dataclass(frozen=True, slots=True)
class Done:
    """Node -> neighbour: no exchange of mine on ``edge`` is pending; ``heard`` is 1 once I
    have had the neighbour's own Done on it, else 0 (:mod:`gossip.exchange.parting`)."""

    TYPE: ClassVar[str] = "done"
    src: int
    edge: int
    heard: int
