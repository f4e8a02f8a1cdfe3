"""What registration hands out: the run's plan, who got which id, and every node's bootstrap.

Everything a :class:`~gossip.wire.schema.Bootstrap` depends on is in :class:`Plan` (the run's
fixed settings, known before any node registers) and :class:`Assignment` (who got which id,
the epoch, the initial values: fixed at bootstrap). :func:`build_bootstraps` turns the two into
every node's Bootstrap (pure); the Assignment is JSON-ready, so a restarted coordinator builds
the very same Bootstraps from the retained status (:meth:`Registry.restore
<coordinator.membership.registry.Registry.restore>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.optimization import OptTask
from continuized.coordinator.membership.security import Security
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import GossipParams
from continuized.gossip.wire.schema import Bootstrap, Neighbor

if TYPE_CHECKING:  # the trainer's imports take a second: a gossip run does not pay them
    from continuized.gossip.train.recipe import Recipe

__all__ = ["Assignment", "Plan", "build_bootstraps", "natural_key"]


@dataclass(frozen=True, slots=True)
class Plan:
    """The fixed settings of a run, known before any node registers.

    Attributes
    ----------
    topology : Topology
        The graph and its edge probabilities; ``topology.n`` nodes are expected.
    params : GossipParams
        ``algorithm``, ``eta``, ``c``, ``theta`` from the core.
    cluster : str
        Cluster name (MQTT topics ``gossip/<cluster>/...``).
    rate : float
        Network-wide activations per second.
    broker : str
        ``mqtt://host:port`` as the nodes must reach it, or ``""``.
    metrics_period : float
        Seconds between two state reports of a node.
    values : ndarray of shape (n, dim), optional
        Initial values chosen by the experiment; ``None``: every node brings its own.
    dim : int
        Components of every value (``values.shape[1]`` when the experiment chooses them).
    start_delay : float
        Seconds between the bootstrap and the epoch (``t = 0``), so that every node has its
        Bootstrap and its sockets connected before the clocks start. A secure run adds its
        handshakes' time (:func:`coordinator.membership.handshakes.handshake_wait`).
    security : Security or None
        Keys of a secured cluster: neighbours' public keys and per-node MQTT credentials go
        into the bootstraps (``None``: insecure).
    task : OptTask or None
        An optimization run (``--problem``): its specs, dual parameters and per-edge steps go
        in every Bootstrap, and ``values`` are then zero vectors of dimension ``d``.
    """

    topology: Topology
    params: GossipParams
    cluster: str
    rate: float
    broker: str
    metrics_period: float
    values: NDArray[np.float64] | None = None
    dim: int = 1
    start_delay: float = 1.5
    task: OptTask | None = None
    security: Security | None = None
    training: Recipe | None = None

    @property
    def expected(self) -> int:
        """Number of nodes the run waits for."""
        return self.topology.n


@dataclass(frozen=True, slots=True)
class Assignment:
    """Who got which id, when t starts, and the initial values: fixed at bootstrap.

    Attributes
    ----------
    run_id : str
        Identifier of the run.
    epoch : float
        Unix time of ``t = 0``.
    names : tuple of str
        Node name by id.
    addresses : tuple of str
        Node exchange address by id.
    initial : tuple of tuple of float
        Initial value by id (empty in a training run: each node draws its own model, and
        the coordinator holds them all in ``Plan.values``).
    """

    run_id: str
    epoch: float
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    initial: tuple[tuple[float, ...], ...]

    def as_dict(self) -> dict[str, Any]:
        """Return the assignment as a JSON-ready dict (see :meth:`from_dict`)."""
        return {
            "run_id": self.run_id,
            "epoch": self.epoch,
            "names": list(self.names),
            "addresses": list(self.addresses),
            "initial": [list(v) for v in self.initial],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Assignment:
        """Rebuild an assignment from :meth:`as_dict` output; raise ConfigError if malformed."""
        try:
            names = tuple(str(s) for s in data["names"])
            addresses = tuple(str(s) for s in data["addresses"])
            initial = tuple(tuple(float(c) for c in v) for v in data["initial"])
            out = cls(str(data["run_id"]), float(data["epoch"]), names, addresses, initial)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed run assignment in the status topic: {exc!r}") from None
        if not (len(names) == len(addresses) == len(initial)):
            raise ConfigError(
                "malformed run assignment: names, addresses, initial differ in length"
            )
        return out


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting ``node-2`` before ``node-10`` (digit runs compare as numbers)."""
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def build_bootstraps(plan: Plan, assignment: Assignment) -> list[Bootstrap]:
    """Return every node's Bootstrap, by id, for ``plan`` and ``assignment`` (pure).

    Node ``v`` gets its neighbours ``w`` (id, address, edge index, ``P_e``) in the topology's
    edge order, the algorithm's parameters, the epoch and rate, and its initial value. An
    optimization run adds the specs (never data) and each edge's step ``s_e``; a training
    run the model's specs and seeds, ``init`` and ``dim``, and no initial value (the node
    draws its own model).
    """
    topo, params, task, sec = plan.topology, plan.params, plan.task, plan.security
    keys = sec.allowed if sec is not None else {}
    recipe = plan.training
    split = task.split if task is not None else recipe.split if recipe is not None else ""
    train: dict[str, Any] = {}
    if recipe is not None:
        train = {
            "train": recipe.model,
            "rate_com": recipe.rate_com,
            "lr": recipe.lr,
            "momentum": recipe.momentum,
            "batch_size": recipe.batch_size,
            "seed": recipe.seed,
            "init": recipe.init,  # how each node draws its own initial model
        }
    out = []
    for node in range(topo.n):
        neighbors = tuple(
            Neighbor(
                peer,
                assignment.addresses[peer],
                k,
                float(topo.probs[k]),
                0.5 if task is None else task.steps[k],
                keys.get(assignment.names[peer], ""),
            )
            for k, peer in topo.incident(node)
        )
        out.append(
            Bootstrap(
                node_id=node,
                cluster=plan.cluster,
                algorithm=(
                    "acd"
                    if task is not None
                    else recipe.algorithm
                    if recipe is not None
                    else params.algorithm.value
                ),
                eta=params.eta,
                c=params.c,
                theta=params.theta,
                epoch=assignment.epoch,
                rate=plan.rate,
                neighbors=neighbors,
                initial_value=assignment.initial[node],
                broker=plan.broker if sec is None else sec.node_broker(plan.broker, node),
                metrics_period=plan.metrics_period,
                dim=plan.dim if recipe is not None else len(assignment.initial[node]),
                problem="" if task is None else task.problem,
                data=task.data if task is not None else recipe.data if recipe is not None else "",
                split=split,
                n=topo.n,
                **train,
            )
        )
    return out
