"""Continuized gossip: the core shared by the live node, the coordinator and the simulators.

One concept per subpackage:

* :mod:`gossip.model` -- what one node holds and how it moves: closed-form mixing, the RG/ARG
  jumps, the flow ledger, the algorithms' parameters, initial values;
* :mod:`gossip.graph` -- topology specs and the spectral quantities (mu_gossip, R_eff, R_max);
* :mod:`gossip.wire` -- the wire format, the only place frames are built and parsed;
* :mod:`gossip.exchange` -- the exchange protocol as a sans-IO state machine, and membership;
* :mod:`gossip.sim` -- the exact gossip simulator (numba kernel, numpy engine, churn model);
* :mod:`gossip.optim` -- continuized Nesterov acceleration as an optimizer (the paper's first
  half);
* :mod:`gossip.problems`, :mod:`gossip.datasets`, :mod:`gossip.dual` -- decentralized
  optimization: local problems, their data and shards, and the dual accelerated simulator;
* :mod:`gossip.train` -- decentralized training (A²CiD², AD-PSGD), simulated exactly;
* :mod:`gossip.files` -- key files and the simulator's output files;
* :mod:`gossip.errors` -- the one exception hierarchy.

The protocol and the model (:mod:`gossip.wire`, :mod:`gossip.exchange`, and the mixing, jumps,
ledger and parameters of :mod:`gossip.model`) are pure: they never read the clock, touch the
network or the disk, or use a global random generator; time and ``rng`` come in as arguments.
An import-linter contract checks that they import no ``os``, ``time``, ``socket``, ``pathlib``,
``asyncio``, ``zmq`` or :mod:`gossip.files`. The live node and the simulators call the same
functions, so they cannot drift apart. What reads files is named: :mod:`gossip.files`, and
the ``file:PATH`` specs of topologies, values and data sets.

The command line (the ``cli`` package) sits above the core, the node and the coordinator.
"""

import importlib
from typing import TYPE_CHECKING, Any

from continuized.gossip.errors import (
    ConfigError,
    GossipError,
    LocalError,
    ProtocolError,
    RemoteError,
    TopologyError,
    TransportError,
)
from continuized.gossip.model.algorithms import (
    Algorithm,
    GossipParams,
    gossip_params,
    parse_algorithm,
)
from continuized.gossip.model.jumps import Flow, apply_flow, edge_flow, jump, late_flow
from continuized.gossip.model.mixing import decay, mix, mix_convex

if TYPE_CHECKING:
    from continuized.gossip.graph.spectral import GraphQuantities, graph_quantities, laplacian
    from continuized.gossip.graph.topology import Topology, parse_topology, topology_from_graph

# networkx and scipy cost ~40 MB of memory and ~0.4 s: they load on first use, so that a node
# process (which never needs them) stays small and `gossip --help` stays fast.
_LAZY = {
    "GraphQuantities": "continuized.gossip.graph.spectral",
    "graph_quantities": "continuized.gossip.graph.spectral",
    "laplacian": "continuized.gossip.graph.spectral",
    "Topology": "continuized.gossip.graph.topology",
    "parse_topology": "continuized.gossip.graph.topology",
    "topology_from_graph": "continuized.gossip.graph.topology",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Algorithm",
    "ConfigError",
    "Flow",
    "GossipError",
    "GossipParams",
    "GraphQuantities",
    "LocalError",
    "ProtocolError",
    "RemoteError",
    "Topology",
    "TopologyError",
    "TransportError",
    "apply_flow",
    "decay",
    "edge_flow",
    "gossip_params",
    "graph_quantities",
    "jump",
    "laplacian",
    "late_flow",
    "mix",
    "mix_convex",
    "parse_algorithm",
    "parse_topology",
    "topology_from_graph",
]
