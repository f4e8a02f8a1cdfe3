"""The gossip node: one OS process that gossips with its neighbours over sockets.

Public API (for the launcher and for tests):

* :class:`NodeConfig` -- everything ``gossip node`` accepts;
* :func:`run_node` -- **async**: register, gossip, stop on command or signal; returns 0;
  :func:`run_node_sync` runs it in a fresh event loop;
* :func:`run_host` / :func:`run_host_sync` -- host mode: K nodes in one process and event loop
  (:func:`host_configs` names and places them); ``run_node`` is a host of one;
* :class:`Node` -- a node already bootstrapped, on any :class:`Transport` (tests run many in
  one process over a :class:`FakeNetwork`);
* transports: :class:`Transport`, :class:`ZmqTransport`, :class:`FakeNetwork` /
  :class:`FakeTransport`, and :class:`FaultyTransport` with :func:`parse_faults`.
"""

from continuized.node.config import NodeConfig, host_configs, parse_value
from continuized.node.daemon import Node
from continuized.node.host import run_host, run_host_sync, run_node, run_node_sync
from continuized.node.transport.fake import FakeNetwork, FakeTransport
from continuized.node.transport.faults import FaultSpec, FaultyTransport, parse_faults
from continuized.node.transport.interface import Incoming, Transport, TransportStats
from continuized.node.transport.zeromq import ZmqTransport

__all__ = [
    "FakeNetwork",
    "FakeTransport",
    "FaultSpec",
    "FaultyTransport",
    "Incoming",
    "Node",
    "NodeConfig",
    "Transport",
    "TransportStats",
    "ZmqTransport",
    "host_configs",
    "parse_faults",
    "parse_value",
    "run_host",
    "run_host_sync",
    "run_node",
    "run_node_sync",
]
