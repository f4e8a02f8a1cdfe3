"""Claiming a node key pair from a shared pool: identical replicas, each with its own key.

The replicas of a container service (``docker compose up --scale node=16``) are identical, so
none can be handed a key of its own; instead a one-shot service provisions N key pairs into a
volume (``gossip keys init --pool``) and every node process claims as many as it runs nodes
(``gossip node --keys-pool DIR``)::

    DIR/node-K/identity.json, secret.key   a key pair (from gossip keys init)
    DIR/node-K/.lock                       held (flock) by the process using the key
    DIR/node-K/claimed-by                  the claimant's name: who used the key last
    DIR/ready                              written last by the provisioning service

A claim is an exclusive ``flock`` on the key's lock file, held as long as the process lives: the
kernel releases it when the process dies, however it dies, so no claim outlives its owner and
two live processes never share a key (the volume is one file system, seen by every container on
its host). A claimant takes, in this order, the key it claimed before (a restarted container
keeps its hostname, a Swarm task its slot: it gets its key, hence its node name and id, back),
a key never claimed, or a key whose owner is gone (containers recreated by a new ``up`` under
new hostnames). When every key is held by a live process the pool is exhausted: more replicas
than the graph has nodes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from continuized.gossip.errors import ConfigError

__all__ = ["KeyLease", "claim_keys", "pool_ready"]

_READY = "ready"
_OWNER = "claimed-by"


@dataclass(slots=True)
class KeyLease:
    """Key directories claimed by this process, in the claimants' order.

    The claims last until :meth:`release` or the end of the process.
    """

    keys: list[Path]
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        """Give the keys back to the pool (closing the locks releases them)."""
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def pool_ready(pool: Path) -> bool:
    """Whether the provisioning service has finished writing ``pool``."""
    return (pool / _READY).exists()


def _owner(directory: Path) -> str | None:
    try:
        return (directory / _OWNER).read_text().strip()
    except FileNotFoundError:
        return None


def _try_lock(directory: Path) -> int | None:
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _mark(directory: Path, claimant: str) -> None:
    # Written aside and renamed: a reader never sees half a name.
    tmp = directory / f".{_OWNER}.{os.getpid()}"
    tmp.write_text(claimant + "\n")
    os.replace(tmp, directory / _OWNER)


def claim_keys(pool: Path, claimants: Sequence[str]) -> KeyLease:
    """Claim one key directory of ``pool`` per name in ``claimants`` (see the module header).

    Raises
    ------
    ConfigError
        ``pool`` is not a provisioned pool, or it has no key left that no live process holds.
    """
    if not pool.is_dir() or not pool_ready(pool):
        raise ConfigError(
            f"{pool} is not a provisioned key pool (no {pool / _READY}); create one with "
            "`gossip keys init --dir DIR --nodes N --pool` and pass DIR/pool"
        )
    keys = sorted(
        (d for d in pool.iterdir() if (d / "identity.json").is_file()), key=lambda d: d.name
    )
    lease = KeyLease([])
    try:
        for claimant in claimants:
            owners = {d: _owner(d) for d in keys if d not in lease.keys}
            order = (
                [d for d, who in owners.items() if who == claimant]
                + [d for d, who in owners.items() if who is None]
                + [d for d, who in owners.items() if who not in (None, claimant)]
            )
            for directory in order:
                fd = _try_lock(directory)
                if fd is not None:
                    _mark(directory, claimant)
                    lease.keys.append(directory)
                    lease._fds.append(fd)
                    break
            else:
                raise ConfigError(
                    f"the key pool {pool} is exhausted: all {len(keys)} key pairs are held by "
                    f"running nodes, none is left for {claimant!r}; run at most as many nodes "
                    "as the graph has (replicas x nodes per container), or provision a pool "
                    "for a bigger graph (`docker compose down -v` drops the old one)"
                )
    except BaseException:
        lease.release()
        raise
    return lease
