"""The messages between a node and the coordinator: registration, bootstrap and lifeline.

:class:`Register`, :class:`Bootstrap` (with its :class:`Neighbor` entries) and
:class:`RegisterError` (contract C2); a host process's nodes at once, :class:`RegisterBatch`
answered by :class:`BootstrapBatch` (:mod:`node.registration`), and :class:`BeatBatch` (their
lifelines' beats, and the echoes); :class:`Leave` (a node leaving for good); :class:`Beat` and
:class:`Stop` (the lifeline that outlives the broker, :mod:`node.lifeline`). The rules a
Bootstrap's fields obey together are here too (:func:`check_bootstrap_model`,
:func:`check_bootstrap_algorithm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from continuized.gossip.errors import ConfigError, ProtocolError
from continuized.gossip.model.algorithms import check_algorithm
from continuized.gossip.wire.checks import (
    MAX_RAW_DIM,
    Floats,
)

__all__ = [
    "Beat",
    "BeatBatch",
    "Bootstrap",
    "BootstrapBatch",
    "Leave",
    "Neighbor",
    "Register",
    "RegisterBatch",
    "RegisterError",
    "Stop",
    "check_bootstrap_algorithm",
    "check_bootstrap_model",
]


# What a training bootstrap may name (gossip.train.recipe.LIVE_ALGORITHMS; the wire does not
# import the trainer).
_TRAINING = ("a2cid2", "adpsgd", "local")


# What a training bootstrap's ``init`` may be when the node draws its own model
# (gossip.train.recipe.INITS).
_INITS = ("common", "per-node")


@dataclass(frozen=True, slots=True)
class Register:
    """Node -> coordinator: I am ``name``, reachable at ``address``; optionally my own value.

    ``ready``: the node could take its first step now. A node that still has to set up for
    the run (read its shard, build its model or problem) registers first with ``ready``
    false, gets a draft :class:`Bootstrap` (:attr:`Bootstrap.draft`: the run's settings and
    its id, no epoch yet), sets up, and registers again, ready; the coordinator fixes the
    epoch once every node is ready (:mod:`coordinator.membership.registry`). A field added
    within version 6 (:data:`gossip.wire.schema.frames.OPTIONAL_FIELDS`): left out while
    true, so that an older node's registration reads as a ready one, as it always was.
    """

    TYPE: ClassVar[str] = "register"
    name: str
    address: str
    value: Floats | None
    pid: int
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Leave:
    """Node -> coordinator: take node ``name`` out of the cluster for good (``gossip node
    --leave``); the coordinator echoes it back once the view without the node is published.

    In a secured cluster it comes over CURVE and is taken only from ``name``'s own key.
    """

    TYPE: ClassVar[str] = "leave"
    name: str


@dataclass(frozen=True, slots=True)
class Beat:
    """Node -> coordinator, every second after the bootstrap: ``name`` still gossips in the run of
    ``epoch``; ``final`` is its final report (JSON) once it stopped, else ``""``. The coordinator
    echoes it (``final`` ``"taken"`` once it holds the report), or answers a :class:`Stop`.

    ``final_over_mqtt``: the node stopped, and its final report, too large for a beat, went
    over MQTT only; ``final`` is then ``""``. Such a beat postdates the stop, so the
    coordinator may answer it ``"taken"`` once it holds the report from MQTT
    (:mod:`coordinator.run.enrollment`). A field added within version 6
    (:data:`gossip.wire.schema.frames.OPTIONAL_FIELDS`): left out while false, so that a beat,
    alone or in a :class:`BeatBatch`, is the frame an older peer sends and reads, and false
    where an older node's beat leaves it out. An older
    coordinator refuses a beat that sets it (:mod:`node.lifeline` then beats without it).
    """

    TYPE: ClassVar[str] = "beat"
    TAKEN: ClassVar[str] = "taken"
    name: str
    epoch: float
    final: str
    final_over_mqtt: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Coordinator -> node, the answer to a :class:`Beat` once the run of ``epoch`` is over."""

    TYPE: ClassVar[str] = "stop"
    epoch: float
    reason: str


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
    the node's time is ``t = rate * (now - epoch)``. ``broker`` is ``mqtt://host:port`` or
    ``""``. An ``epoch`` of :attr:`DRAFT_EPOCH` (0) makes it a draft (:attr:`draft`): the
    answer to a registration that is not ready (:class:`Register`), for the node to set up
    from; it never runs.

    Optimization runs (``problem`` not empty) also carry the problem spec, the data spec and the
    split (never data: each node loads its own shard), and ``n``, the node count the split cuts
    the data into; ``eta``, ``c`` and the neighbours' steps are then the dual parameters.

    Training runs (``train`` not empty: the model spec, :mod:`gossip.train.recipe`) carry the
    data, split and ``n`` too, the communications per node per unit of t ``rate_com``, the
    local optimizer (``lr``, ``momentum``, ``batch_size``) and the ``seed`` of the node's
    streams; ``eta``, ``c`` are the exchange's constants. ``t`` then counts gradient steps per
    node, and ``rate`` is steps per second. Their ``initial_value`` is empty and ``init``
    (``common`` or ``per-node``) says how the node draws its own initial model of ``dim``
    parameters (:func:`gossip.train.trainer.node_initial`, up to :data:`MAX_RAW_DIM`), so a
    model of any size fits in the frame. (A training Bootstrap that carries the model in
    ``initial_value``, as earlier coordinators sent it, still decodes.)
    """

    TYPE: ClassVar[str] = "bootstrap"
    DRAFT_EPOCH: ClassVar[float] = 0.0
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
    train: str = ""
    rate_com: float = 0.0
    lr: float = 0.0
    momentum: float = 0.0
    batch_size: int = 0
    seed: int = 0
    init: str = ""

    @property
    def draft(self) -> bool:
        """Whether this is a draft, to set up from (no epoch yet), not the run's Bootstrap."""
        return self.epoch == self.DRAFT_EPOCH


@dataclass(frozen=True, slots=True)
class RegisterError:
    """Coordinator -> node: the registration was refused, and why."""

    TYPE: ClassVar[str] = "register_error"
    reason: str


@dataclass(frozen=True, slots=True)
class RegisterBatch:
    """Host process -> coordinator: the registrations of several of its nodes, in one message.

    A host of K nodes sends one of these instead of K :class:`Register`, so the coordinator
    serves one message (and, secure, one CURVE connection) per process rather than per node.
    Secure, the coordinator takes it only from a key whose host process holds every name in it
    (:func:`coordinator.membership.registrar.serve_registrations`).
    """

    TYPE: ClassVar[str] = "register_batch"
    nodes: tuple[Register, ...]


@dataclass(frozen=True, slots=True)
class BootstrapBatch:
    """Coordinator -> host process: the Bootstraps of some of a :class:`RegisterBatch`'s nodes,
    ``bootstraps[i]`` for node ``names[i]``. A batch too large for one frame comes as several."""

    TYPE: ClassVar[str] = "bootstrap_batch"
    names: tuple[str, ...]
    bootstraps: tuple[Bootstrap, ...]


@dataclass(frozen=True, slots=True)
class BeatBatch:
    """Host process <-> coordinator: the :class:`Beat` of several of its nodes in one message
    (:mod:`node.lifeline`), and the coordinator's echoes of them (a :class:`Stop` or a
    refusal goes on its own)."""

    TYPE: ClassVar[str] = "beat_batch"
    beats: tuple[Beat, ...]


def check_bootstrap_model(values: Mapping[str, Any]) -> None:
    """A bootstrap carries the node's initial value (``dim`` components), or trains a model of
    ``dim`` parameters that the node draws itself as ``init`` says."""
    start, dim, train, init = (
        values["initial_value"],
        values["dim"],
        values["train"],
        values["init"],
    )
    if init and not train:
        raise ProtocolError(
            f"field 'init' is {init!r} but 'train' is empty; only a training bootstrap names "
            "how its node draws its model"
        )
    if start:
        if len(start) != dim:
            raise ProtocolError(
                f"field 'initial_value' has {len(start)} components but 'dim' is {dim}"
            )
        return
    if not train:
        raise ProtocolError(
            f"field 'initial_value' is empty, but 'train' is empty too: a bootstrap that trains "
            f"no model carries its node's initial value, 'dim' = {dim} components"
        )
    if not 1 <= dim <= MAX_RAW_DIM:
        raise ProtocolError(
            f"field 'dim' must be 1 to {MAX_RAW_DIM} parameters (a model's exchange bound), "
            f"got {dim}"
        )
    if init not in _INITS:
        raise ProtocolError(
            f"field 'init' must be one of {', '.join(_INITS)} when 'initial_value' is empty "
            f"(the node draws its own model), got {init!r}"
        )


def check_bootstrap_algorithm(algorithm: str, problem: str, train: str = "") -> None:
    """A node runs only what the one rule allows
    (:func:`gossip.model.algorithms.check_algorithm`), or trains with a live algorithm."""
    if not algorithm:  # an empty name would mean "the default": a bootstrap names its algorithm
        raise ProtocolError("field 'algorithm' is empty; a bootstrap names its algorithm")
    if train:
        if problem or algorithm not in _TRAINING:
            raise ProtocolError(
                f"field 'algorithm' {algorithm!r} cannot train (with problem {problem!r}); "
                f"valid: {', '.join(_TRAINING)} and no problem"
            )
        return
    try:
        check_algorithm(algorithm, problem=bool(problem), live=True)
    except ConfigError as exc:
        raise ProtocolError(
            f"field 'algorithm' {algorithm!r} does not go with problem {problem!r}: {exc}"
        ) from None
