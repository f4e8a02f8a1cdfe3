"""Wire messages: the one module that builds and parses frames.

Every frame is a msgpack map with a protocol version ``v`` (:data:`VERSION`), a ``type`` tag and
the message's fields. Messages are frozen dataclasses; :func:`encode` turns one into bytes and
:func:`decode` turns bytes back into a message after checking every field, so that nothing a peer
sends can reach the node's state unchecked. The exchange's own three messages take a faster
path under the same rules (:mod:`gossip.wire.hot`).

Validation rules (each violation raises :class:`~gossip.errors.ProtocolError` naming the field):

* the frame is a msgpack map of at most :data:`MAX_FRAME` bytes;
* ``v`` equals :data:`VERSION` and ``type`` is one of :data:`MESSAGE_TYPES`;
* every field of the type is present and no other field is;
* integers are ints (not bools), ``>= 0`` and ``<=`` :data:`MAX_INT`; floats are finite
  numbers (ints are accepted and converted); vectors are non-empty lists of finite numbers of
  at most :data:`MAX_DIM` entries; strings are strings.

Gossip exchange (node to node; the protocol is :mod:`gossip.exchange.exchanger`'s, each class says
what it carries): :class:`Request`, answered by a :class:`Reply` (the jump's flow), a :class:`Busy`
(refused: try again later) or a :class:`Nack` (never applied: closed or recovering);
:class:`LedgerRequest` and :class:`LedgerReply` (a restarted node's recovery), :class:`Moved`
(its new address) and :class:`Done` (a stopping node's goodbye, :mod:`gossip.exchange.parting`).

Registration (node to coordinator, contract C2): :class:`Register`, :class:`Bootstrap` (with its
:class:`Neighbor` entries) and :class:`RegisterError`; :class:`Leave` (a node leaving for good).

Examples
--------
>>> msg = Request(src=1, edge=0, seq=7, ack=6, t=2.5, u=(1.0,))
>>> decode(encode(msg)) == msg
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeAlias, get_args

import msgpack

from gossip.errors import ConfigError, ProtocolError
from gossip.model.algorithms import check_algorithm
from gossip.wire.checks import (
    MAX_DIM,
    MAX_INT,
    Checker,
    Floats,
    floats,
    integer,
    number,
    optional_floats,
    positive,
    string,
)
from gossip.wire.hot import FIELDS as _HOT_FIELDS
from gossip.wire.hot import body_builders

__all__ = [
    "MAX_DIM",
    "MAX_FRAME",
    "MAX_INT",
    "MESSAGE_TYPES",
    "VERSION",
    "Bootstrap",
    "Busy",
    "Done",
    "Leave",
    "LedgerReply",
    "LedgerRequest",
    "Message",
    "Moved",
    "Nack",
    "Neighbor",
    "Register",
    "RegisterError",
    "Reply",
    "Request",
    "decode",
    "encode",
]

VERSION = 6
"""The protocol version in every frame's ``v`` (3: a request may let its jump move later; 4: a
request says which of the server's requests its initiator had answered, ``served``, and a
ledger reply which of its sender's are settled; 5: a crossing request that cannot move is
served, and the server's own request withdrawn, :mod:`gossip.exchange.crossing`; 6: a reply
carries the server's wall clock, ``wall``)."""

MAX_FRAME = 1 << 20
"""Largest frame accepted, in bytes (a Bootstrap of a node with thousands of neighbours fits)."""


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
    u: Floats
    z: Floats | None = None
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
    dx: Floats
    dz: Floats
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


@dataclass(frozen=True, slots=True)
class Register:
    """Node -> coordinator: I am ``name``, reachable at ``address``; optionally my own value."""

    TYPE: ClassVar[str] = "register"
    name: str
    address: str
    value: Floats | None
    pid: int


@dataclass(frozen=True, slots=True)
class Leave:
    """Node -> coordinator: take node ``name`` out of the cluster for good (``gossip node
    --leave``); the coordinator echoes it back once the view without the node is published.

    In a secured cluster it comes over CURVE and is taken only from ``name``'s own key.
    """

    TYPE: ClassVar[str] = "leave"
    name: str


@dataclass(frozen=True, slots=True)
class Neighbor:
    """One neighbour in a :class:`Bootstrap`: its id, address, the shared edge and its P_e.

    ``step`` is the edge's step ``s_e`` in the jump (``1/2`` for gossip; ``gamma R_eff(e)`` for
    dual accelerated coordinate descent, the paper's Section 7). ``key`` is the neighbour's CURVE
    public key (Z85), or ``""`` in an insecure cluster.
    """

    peer_id: int
    address: str
    edge_index: int
    prob: float
    step: float = 0.5
    key: str = ""


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """Coordinator -> node: everything a node needs to gossip (contract C2).

    ``epoch`` is a Unix time in seconds and ``rate`` the network-wide activations per second:
    the node's time is ``t = rate * (now - epoch)``. ``broker`` is ``mqtt://host:port`` or ``""``.

    Optimization runs (``problem`` not empty) also carry the problem spec, the data spec and the
    split (never data: each node loads its own shard), and ``n``, the node count the split cuts
    the data into; ``eta``, ``c`` and the neighbours' steps are then the dual parameters.
    """

    TYPE: ClassVar[str] = "bootstrap"
    node_id: int
    cluster: str
    algorithm: str
    eta: float
    c: float
    theta: float
    epoch: float
    rate: float
    neighbors: tuple[Neighbor, ...]
    initial_value: Floats
    broker: str
    metrics_period: float
    dim: int
    problem: str = ""
    data: str = ""
    split: str = ""
    n: int = 0


@dataclass(frozen=True, slots=True)
class RegisterError:
    """Coordinator -> node: the registration was refused, and why."""

    TYPE: ClassVar[str] = "register_error"
    reason: str


Message: TypeAlias = (
    Request
    | Reply
    | Busy
    | Nack
    | LedgerRequest
    | LedgerReply
    | Moved
    | Done
    | Register
    | Leave
    | Bootstrap
    | RegisterError
)

_CLASSES: tuple[type[Any], ...] = get_args(Message)
MESSAGE_TYPES: tuple[str, ...] = tuple(cls.TYPE for cls in _CLASSES)
"""The valid values of the ``type`` field."""


# --- encoding ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, Neighbor):
        return [value.peer_id, value.address, value.edge_index, value.prob, value.step, value.key]
    return [_plain(item) for item in value] if type(value) is tuple else value


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}
_PACKER = msgpack.Packer(use_bin_type=True)  # msgpack.packb would build one per call
_HOT_BODIES = body_builders(VERSION)  # the exchange's own messages: gossip.wire.hot


def encode(message: Message) -> bytes:
    """Return the msgpack frame of ``message`` (fields plus ``v`` and ``type``).

    Encoding does not validate: the receiver does (see :func:`decode`).
    """
    hot = _HOT_BODIES.get(message.TYPE)
    if hot is not None:
        return _PACKER.pack(hot(message))  # type: ignore[no-any-return]
    names = _FIELD_NAMES.get(type(message))
    if names is None:  # dataclasses.fields() is slow: look each class up once
        names = _FIELD_NAMES[type(message)] = tuple(f.name for f in fields(message))
    body: dict[str, Any] = {"v": VERSION, "type": message.TYPE}
    for name in names:
        value = getattr(message, name)
        body[name] = _plain(value) if type(value) is tuple else value
    return _PACKER.pack(body)  # type: ignore[no-any-return]


# --- decoding and validation ---------------------------------------------------------------


def _neighbors(name: str, value: Any) -> tuple[Neighbor, ...]:
    if not isinstance(value, list):
        raise ProtocolError(f"field {name!r} must be a list, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, list) or len(item) not in (5, 6):
            raise ProtocolError(
                f"field {where!r} must be [peer_id, address, edge_index, prob, step, key], "
                f"got {item!r}"
            )
        prob = number(f"{where}.prob", item[3])
        if not 0.0 < prob <= 1.0:
            raise ProtocolError(f"field {where + '.prob'!r} must be in (0, 1], got {prob!r}")
        out.append(
            Neighbor(
                integer(f"{where}.peer_id", item[0]),
                string(f"{where}.address", item[1]),
                integer(f"{where}.edge_index", item[2]),
                prob,
                positive(f"{where}.step", item[4]),
                string(f"{where}.key", item[5]) if len(item) == 6 else "",
            )
        )
    return tuple(out)


# The schema of every message: each field's checker follows from its type in the class, but
# where a field must be more than its type says (:data:`_STRICTER`).
_BY_TYPE: dict[str, Checker] = {
    "int": integer,
    "float": number,
    "str": string,
    "Floats": floats,
    "Floats | None": optional_floats,
    "tuple[Neighbor, ...]": _neighbors,
}
_STRICTER: dict[tuple[str, str], Checker] = {
    ("bootstrap", "rate"): positive,
    ("bootstrap", "metrics_period"): positive,
}


def _schema(cls: type[Any]) -> tuple[type[Any], Mapping[str, Checker]]:
    checkers = {
        f.name: _STRICTER.get((cls.TYPE, f.name)) or _BY_TYPE[str(f.type)] for f in fields(cls)
    }
    return cls, checkers


_SCHEMAS: dict[str, tuple[type[Any], Mapping[str, Checker]]] = {
    cls.TYPE: _schema(cls) for cls in _CLASSES
}
"""Message type -> its class and its fields' checkers, in the class's order."""

# Vectors that must have the same length within one message.
_SAME_LENGTH: dict[str, tuple[str, str]] = {
    Reply.TYPE: ("dx", "dz"),
    LedgerReply.TYPE: ("fx", "fz"),
}


def decode(frame: bytes) -> Message:
    """Parse and validate one frame, and return its message.

    Raises
    ------
    ProtocolError
        The frame is not msgpack, not a map, too large, of another version, of an unknown type,
        or one of its fields is missing, unexpected, of the wrong type or not finite. The message
        names the field and what would have been valid.
    """
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the limit of {MAX_FRAME}")
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises many unrelated types on garbage
        raise ProtocolError(f"frame is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"frame must be a msgpack map, got {type(body).__name__}")
    version = body.pop("v", None)
    if version != VERSION or type(version) is not int:
        raise ProtocolError(f"field 'v' must be {VERSION} (protocol version), got {version!r}")
    kind = body.pop("type", None)
    schema = _SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        raise ProtocolError(f"field 'type' must be one of {', '.join(MESSAGE_TYPES)}, got {kind!r}")
    hot = _HOT_FIELDS.get(kind)
    fast = None if hot is None else hot(body)
    return schema[0](*fast) if fast is not None else _checked(kind, body)


def _checked(kind: str, body: dict[str, Any]) -> Message:
    """The message of type ``kind`` whose fields (``v`` and ``type`` popped) are ``body``,
    checked by the schema (:data:`_SCHEMAS`)."""
    cls, checkers = _SCHEMAS[kind]
    if body.keys() != checkers.keys():
        missing = [name for name in checkers if name not in body]
        if missing:
            raise ProtocolError(
                f"{kind} message is missing field(s) {', '.join(map(repr, missing))}"
            )
        extra = sorted(str(name) for name in body if name not in checkers)
        raise ProtocolError(
            f"{kind} message has unexpected field(s) {', '.join(map(repr, extra))}; valid: "
            f"{', '.join(checkers)}"
        )
    values = {name: check(name, body[name]) for name, check in checkers.items()}
    pair = _SAME_LENGTH.get(kind)
    if pair is not None and len(values[pair[0]]) != len(values[pair[1]]):
        raise ProtocolError(
            f"field {pair[1]!r} has {len(values[pair[1]])} components but {pair[0]!r} has "
            f"{len(values[pair[0]])}; they must match"
        )
    if kind == Bootstrap.TYPE and len(values["initial_value"]) != values["dim"]:
        raise ProtocolError(
            f"field 'initial_value' has {len(values['initial_value'])} components but 'dim' is "
            f"{values['dim']}"
        )
    if kind == Bootstrap.TYPE:
        _check_bootstrap_algorithm(values["algorithm"], values["problem"])
    message: Message = cls(**values)
    return message


def _check_bootstrap_algorithm(algorithm: str, problem: str) -> None:
    """A node runs only what the one rule allows
    (:func:`gossip.model.algorithms.check_algorithm`)."""
    if not algorithm:  # an empty name would mean "the default": a bootstrap names its algorithm
        raise ProtocolError("field 'algorithm' is empty; a bootstrap names its algorithm")
    try:
        check_algorithm(algorithm, problem=bool(problem), live=True)
    except ConfigError as exc:
        raise ProtocolError(
            f"field 'algorithm' {algorithm!r} does not go with problem {problem!r}: {exc}"
        ) from None
