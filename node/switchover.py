"""A running node's side of churn: membership views from the coordinator, switched at T_e.

The rules (which rows are settled, why a jump never mixes two views) are in
:mod:`gossip.exchange.membership`; this module only carries them out on a live node:

* a ``{"cmd": "view", "epoch": E, "view": {...}}`` command on the control topic (the
  coordinator publishes it, and repeats it, after a leave) names the next view and its start
  ``T_e`` (units of t; a "membership epoch", not the run's ``epoch`` E, which only checks that
  the command is for this run);
* a joining node's address comes with the view that adds it: its new neighbours connect to
  it before ``T_e``; the joiner itself starts as a restarted node does (it asks its neighbours
  for their ledgers on the new edges, all zero, answered once they have switched, and so
  starts with its value and zero flows, after ``T_e``);
* a node that is not a member of it leaves: it stops as on ``{"cmd": "stop"}`` (it starts
  nothing more, its exchanges in flight settle, then it Nacks, publishes its final report and
  exits);
* a member sets the exchanger's horizon to ``T_e`` at once (no jump at ``T >= T_e`` in the old
  view), and at its first free moment after ``T_e`` carries its ledger over
  (:func:`gossip.exchange.membership.carry_to`), switches the exchanger
  (:meth:`gossip.exchange.exchanger.Exchanger.switch_view`) and its Poisson clock to the new edges.

Secured (CurveZMQ), the view command also carries the joiners' public keys (``keys``): a node
admits a joining neighbour's key before connecting to it, and at each switch its ZAP
allow-list becomes exactly its new neighbours' keys, so a leaver or a dead node is refused from
then on.

Only gossip runs (not optimization runs, whose steps depend on the data) follow views.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from continuized.gossip.errors import GossipError
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.membership import View, carry_to, view_from_dict
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.wire.schema import Bootstrap
from continuized.node.clock import PoissonClock
from continuized.node.transport.interface import Transport

__all__ = ["MemberNode", "NodeMembership"]

log = logging.getLogger(__name__)

_FREE_POLL = 0.001  # seconds between two looks at the lock while waiting to switch


class MemberNode(Protocol):
    """What a view switch reads and changes of a running node (:class:`node.daemon.Node` is one).

    Stated as a protocol so that this module needs nothing of the daemon that runs it.
    """

    boot: Bootstrap
    transport: Transport
    timebase: TimeBase
    exchanger: Exchanger
    ticks: PoissonClock
    seed: int | None
    problem: Any
    clock: Callable[[], float]

    def request_stop(self) -> None:
        """Stop starting exchanges, settle those in flight, then stop."""


class NodeMembership:
    """The membership view of one node, and its switches (see the module header).

    Attributes
    ----------
    number : int
        The node's current view (0: the bootstrap graph).
    left : bool
        Whether a view without this node came: the node is leaving.
    """

    def __init__(self, node: MemberNode) -> None:
        self.node = node
        self.number = 0
        self.left = False
        self._next: View | None = None
        self._wake = asyncio.Event()
        self._addresses: dict[int, str] = {}  # joined nodes' addresses, from the view commands
        # Secured: the public keys of the neighbours (bootstrap) and of joiners (views).
        self._keys: dict[int, str] = {n.peer_id: n.key for n in node.boot.neighbors if n.key}
        self._trusted_now: set[int] | None = None  # admitted since the last switch

    def on_command(self, command: dict[str, Any]) -> None:
        """Take a control command; act on a view command for this run (never raises)."""
        if command.get("cmd") != "view":
            return
        epoch = command.get("epoch")
        if not isinstance(epoch, int | float) or abs(epoch - self.node.boot.epoch) > 1e-6:
            return  # another run's
        try:
            view = view_from_dict(command.get("view"))
        except GossipError as exc:
            log.warning("ignored a membership view: %s", exc)
            return
        pending = self._next.number if self._next is not None else self.number
        if view.number <= pending or self.left:
            return  # a repeat of one we have
        if view.number != pending + 1 and self.number != 0:
            # A node that joined starts in view 0 of its own, then learns the view it joined.
            log.warning("membership view %d skips views after %d", view.number, pending)
        addresses = command.get("addresses")
        if isinstance(addresses, dict):
            for peer, address in addresses.items():
                if isinstance(address, str) and str(peer).isdigit():
                    self._addresses[int(peer)] = address
        keys = command.get("keys")
        if isinstance(keys, dict):
            for peer, key in keys.items():
                if isinstance(key, str) and key and str(peer).isdigit():
                    self._keys[int(peer)] = key
        if self.node.problem is not None:
            log.warning("membership views are for gossip runs, not optimization: ignored")
            return
        me = self.node.boot.node_id
        if me not in view.members:
            log.info("membership view %d does not have node %d: leaving", view.number, me)
            self.left = True
            self.node.request_stop()
            return
        self.node.exchanger.horizon = view.start  # before T_e: no jump of the old view past it
        self._next = view
        self._wake.set()

    async def run(self) -> None:
        """Switch to each announced view at its start, once the node is free (a task)."""
        node = self.node
        while True:
            await self._wake.wait()
            self._wake.clear()
            view = self._next
            if view is None:
                continue
            me = node.boot.node_id
            known = {n.peer_id for n in node.boot.neighbors}
            joiners = {
                peer: self._addresses[peer]
                for _, peer in view.incident(me)
                if peer not in known and peer in self._addresses
            }
            if joiners and node.transport.secure:
                # Admit the joiners' keys (and still the old neighbours') before connecting.
                old = {n: k for n, k in self._keys.items() if n in self._trusted()}
                node.transport.trust({**old, **self._keys_of(joiners)})
            if joiners:  # a new neighbour: connect before its edge opens at T_e
                await node.transport.connect(joiners)
            delay = node.timebase.wall(view.start) - node.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            while True:  # switch between two exchanges, never in one
                if not node.exchanger.engaged:
                    break
                await asyncio.sleep(_FREE_POLL)
            self.switch(view)

    def switch(self, view: View) -> None:
        """Carry the ledger over to ``view`` and go on with its edges and parameters."""
        node, me = self.node, self.node.boot.node_id
        ex = node.exchanger
        ledger = carry_to(ex.ledger, view, me)
        links = [Link(e, peer, view.prob(e)) for e, peer in view.incident(me)]
        dropped = ex.switch_view(ledger, links, view.c, view.start)
        seed = [view.number, me, 0 if node.seed is None else node.seed]
        node.ticks = PoissonClock(links, np.random.default_rng(seed))
        if node.transport.secure:
            # From T_e only the new neighbours' keys get in: a leaver's or a dead node's key
            # is refused at its next handshake.
            self._trusted_now = {peer for _, peer in view.incident(me)}
            node.transport.trust(self._keys_of(self._trusted_now))
        self.number = view.number
        if self._next is not None and self._next.number <= view.number:
            self._next = None
        elif self._next is not None:
            # The next view was announced before this switch, which reset the horizon: it
            # still ends this view (else this node would jump past its start in this view).
            ex.horizon = self._next.start
        log.info(
            "membership view %d from t=%.1f: %d edges, eta=%.3g (%d exchanges settled)",
            view.number,
            view.start,
            len(links),
            view.eta,
            dropped,
        )

    def _trusted(self) -> set[int]:
        if self._trusted_now is None:
            return {n.peer_id for n in self.node.boot.neighbors}
        return self._trusted_now

    def _keys_of(self, peers: Iterable[int]) -> dict[int, str]:
        missing = sorted(p for p in peers if p not in self._keys)
        if missing:  # never happens with a coordinator of this version: say it, admit the rest
            log.warning("no public key for node(s) %s: they cannot connect", missing)
        return {p: self._keys[p] for p in peers if p in self._keys}

    @property
    def pending_start(self) -> float:
        """``T_e`` of the announced view not switched to yet (``inf``: none)."""
        return self._next.start if self._next is not None else math.inf
