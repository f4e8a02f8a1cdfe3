"""A throw-away network of Linux namespaces for fault tests: one namespace per node, a switch.

Layout (``X`` is a free third octet, claimed atomically by the switch namespace's name; ``P``
the prefix, ``gn<pid>x<X>``)::

    root namespace                 switch namespace P-sw         node namespace P-K
    Ph  10.77.X.1/24 <--veth--> h0 -- br0 -- vK <----veth----> eth0 10.77.X.(K+2)/24
    (broker, coordinator)                                      (one gossip node)

The bridge lives in a namespace of its own, not in the root one: a host running Docker has
``br_netfilter`` loaded and a root ``FORWARD`` policy of ``DROP``, which would silently drop
bridged node-to-node traffic. In the switch namespace the iptables are empty (accept all).

Faults are iptables rules inside each node's namespace, each in a chain of its own so that it
can be counted and removed without touching the other: ``RANDOMDROP`` (the ``statistic``
match, both directions) and ``PARTITION`` (drop everything to and from the other half's
addresses). Only this network's addresses are ever targeted. :meth:`NetLab.close` deletes the
namespaces (and with them every veth, the bridge and every rule) and the host end of the veth.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["NetLab", "netns_unavailable"]

_SUBNET = "10.77"
_CHAINS = ("RANDOMDROP", "PARTITION")
_OURS = re.compile(r"^gn(\d+)x(\d+)-(?:sw|\d+)$")


def _run(argv: Sequence[str], *, check: bool = True) -> str:
    """Run one ``ip``/``iptables`` command; raise with its stderr if it fails and ``check``."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def netns_unavailable() -> str | None:
    """Return why namespaces with veth and iptables cannot be used here, or ``None`` if they can.

    Probes for real (a namespace, a veth pair and an iptables rule with the statistic match),
    since a container may have the tools but not the privileges.
    """
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth and iptables)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/system-deps installs iproute2 and iptables)"
    probe = f"gnprobe{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
    except RuntimeError as exc:
        return f"ip netns is not available: {exc}"
    try:
        _run(["ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"])
        _run(["ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-m", "statistic",
              "--mode", "random", "--probability", "0.5", "-j", "DROP"])  # fmt: skip
    except RuntimeError as exc:
        return f"veth or iptables' statistic match is not available: {exc}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale() -> None:
    """Delete the namespaces and host links of labs whose test process is gone (killed by a
    timeout, say): a leftover host link would keep its subnet's route."""
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        name = line.split(" ", 1)[0]
        found = _OURS.match(name)
        if found is None or _alive(int(found.group(1))):
            continue
        _run(["ip", "netns", "del", name], check=False)
        if name.endswith("-sw"):
            _run(["ip", "link", "del", f"gn{found.group(1)}x{found.group(2)}h"], check=False)


@dataclass
class NetLab:
    """``nodes`` namespaces on one switch, and the root namespace's address on it (``hub``).

    Use as a context manager, or call :meth:`close` (idempotent) in a finalizer: everything is
    removed even if set-up stopped half-way.
    """

    nodes: int
    prefix: str = field(default_factory=lambda: f"gn{os.getpid()}")  # <= 15 chars with "x254h"
    octet: int = 0
    _made: list[str] = field(default_factory=list)
    _host_link: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 250:
            raise ValueError(f"nodes must be in 1..250, got {self.nodes}")

    # -- set-up and tear-down --------------------------------------------------------------

    def open(self) -> NetLab:
        """Create the switch, the host link and every node namespace; return self."""
        _sweep_stale()
        try:
            self._claim_subnet()
            sw = self.switch
            _run(["ip", "-n", sw, "link", "set", "lo", "up"])
            _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", sw, "link", "set", "br0", "up"])
            self._host_link = f"{self.prefix}h"
            _run(["ip", "link", "add", self._host_link, "type", "veth",
                  "peer", "name", "h0", "netns", sw])  # fmt: skip
            _run(["ip", "addr", "add", f"{self.hub}/24", "dev", self._host_link])
            _run(["ip", "link", "set", self._host_link, "up"])
            _run(["ip", "-n", sw, "link", "set", "h0", "master", "br0", "up"])
            for k in range(self.nodes):
                self._add_node(k)
        except BaseException:
            self.close()
            raise
        return self

    def _claim_subnet(self) -> None:
        """Pick a third octet no route uses; the switch namespace's name makes it ours."""
        octets = list(range(1, 255))
        random.shuffle(octets)
        for octet in octets:
            if _run(["ip", "-4", "route", "show", f"{_SUBNET}.{octet}.0/24"]).strip():
                continue
            name = f"{self.prefix}x{octet}-sw"
            try:
                _run(["ip", "netns", "add", name])  # fails if another lab holds this octet
            except RuntimeError:
                continue
            self.octet = octet
            self.prefix = f"{self.prefix}x{octet}"
            self._made.append(name)
            return
        raise RuntimeError(f"no free {_SUBNET}.X.0/24 subnet for the test network")

    def _add_node(self, k: int) -> None:
        ns = self.ns(k)
        _run(["ip", "netns", "add", ns])
        self._made.append(ns)
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", self.switch, "link", "add", f"v{k}", "type", "veth",
              "peer", "name", "eth0", "netns", ns])  # fmt: skip
        _run(["ip", "-n", self.switch, "link", "set", f"v{k}", "master", "br0", "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{self.ip(k)}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        for chain in _CHAINS:
            self.iptables(k, "-N", chain)
            self.iptables(k, "-A", "INPUT", "-j", chain)
            self.iptables(k, "-A", "OUTPUT", "-j", chain)

    def close(self) -> None:
        """Delete every namespace made (their veths, bridge and rules go with them)."""
        for ns in reversed(self._made):
            _run(["ip", "netns", "del", ns], check=False)
        self._made.clear()
        if self._host_link:
            # Its peer's namespace is gone, but the kernel may free the pair a little later.
            _run(["ip", "link", "del", self._host_link], check=False)
            self._host_link = ""

    def __enter__(self) -> NetLab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- names and addresses ---------------------------------------------------------------

    @property
    def switch(self) -> str:
        """The switch namespace's name."""
        return f"{self.prefix}-sw"

    @property
    def subnet(self) -> str:
        """The first three octets of the lab's addresses (a ``/24``)."""
        return f"{_SUBNET}.{self.octet}"

    @property
    def hub(self) -> str:
        """The root namespace's address on the switch (broker and coordinator bind here)."""
        return f"{_SUBNET}.{self.octet}.1"

    def ns(self, k: int) -> str:
        """Node ``k``'s namespace."""
        return f"{self.prefix}-{k}"

    def ip(self, k: int) -> str:
        """Node ``k``'s address."""
        return f"{_SUBNET}.{self.octet}.{k + 2}"

    def exec_argv(self, k: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside node ``k``'s namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns(k), *argv]

    def iptables(self, k: int, *args: str) -> str:
        """Run ``iptables ARGS`` in node ``k``'s namespace; return its output."""
        return _run(self.exec_argv(k, ["iptables", "-w", *args]))

    # -- faults ----------------------------------------------------------------------------

    def drop_randomly(self, k: int, probability: float, peers: Iterable[int] | None = None) -> None:
        """Drop each packet of node ``k`` with ``probability``, in and out: to and from
        ``peers`` only, or (``None``) every packet on the lab's network, the hub's included."""
        if peers is None:
            # In INPUT the source is whoever sent it, in OUTPUT it is us: both on the subnet.
            selectors = [("-s", f"{self.subnet}.0/24")]
        else:
            selectors = [(way, self.ip(p)) for p in peers for way in ("-s", "-d")]
        for way, address in selectors:
            self.iptables(k, "-A", "RANDOMDROP", way, address, "-m", "statistic",
                          "--mode", "random", "--probability", f"{probability:.6f}",
                          "-j", "DROP")  # fmt: skip

    def partition(self, side_a: Iterable[int], side_b: Iterable[int]) -> None:
        """Cut every packet between the two sides (the hub stays reachable from both)."""
        a, b = list(side_a), list(side_b)
        for mine, theirs in ((a, b), (b, a)):
            for k in mine:
                for peer in theirs:
                    self.iptables(k, "-A", "PARTITION", "-s", self.ip(peer), "-j", "DROP")
                    self.iptables(k, "-A", "PARTITION", "-d", self.ip(peer), "-j", "DROP")

    def heal(self) -> None:
        """Remove the partition (the random drop stays)."""
        for k in range(self.nodes):
            self.iptables(k, "-F", "PARTITION")

    def dropped(self, chain: str) -> int:
        """Packets dropped so far by ``chain`` (``RANDOMDROP`` or ``PARTITION``) in all nodes."""
        total = 0
        for k in range(self.nodes):
            out = self.iptables(k, "-L", chain, "-v", "-x", "-n")
            for line in out.splitlines()[2:]:  # after the chain's title and the column header
                fields = line.split()
                if fields and fields[0].isdigit():
                    total += int(fields[0])
        return total
