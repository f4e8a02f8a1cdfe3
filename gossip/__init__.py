"""Continuized gossip: the pure core shared by the live node, the coordinator and the simulator.

The core modules never read the clock, never touch the network or the disk, and never use a
global random generator: time and ``rng`` come in as arguments. The live node and the simulator
call the same functions, so they cannot drift apart.

* :mod:`gossip.topology` -- topology specs, checks and edge probabilities
* :mod:`gossip.spectral` -- mu_gossip, R_eff, R_max, theta_RG, theta_ARG
* :mod:`gossip.params` -- algorithm parameters (eta, c, theta), with the corrected mixing rate
* :mod:`gossip.mixing` -- closed-form mixing over any interval
* :mod:`gossip.optim` -- continuized Nesterov acceleration as an optimizer, and the paper's figures
* :mod:`gossip.jumps` -- RG/ARG jumps as antisymmetric flows, and their late application

The command line (the ``cli`` package) sits above the core, the node and the coordinator.
"""

import importlib
from typing import TYPE_CHECKING, Any

from gossip.errors import (
    ConfigError,
    GossipError,
    LocalError,
    ProtocolError,
    RemoteError,
    TopologyError,
    TransportError,
)
from gossip.jumps import Flow, apply_flow, edge_flow, jump, late_flow
from gossip.mixing import decay, mix, mix_convex
from gossip.params import Algorithm, GossipParams, gossip_params, parse_algorithm

if TYPE_CHECKING:
    from gossip.spectral import GraphQuantities, graph_quantities, laplacian
    from gossip.topology import Topology, parse_topology, topology_from_graph

# networkx and scipy cost ~40 MB of memory and ~0.4 s: they load on first use, so that a node
# process (which never needs them) stays small and `gossip --help` stays fast.
_LAZY = {
    "GraphQuantities": "gossip.spectral",
    "graph_quantities": "gossip.spectral",
    "laplacian": "gossip.spectral",
    "Topology": "gossip.topology",
    "parse_topology": "gossip.topology",
    "topology_from_graph": "gossip.topology",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gossip' has no attribute {name!r}")
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
