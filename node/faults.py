"""Fault injection: a transport wrapper that drops, duplicates and delays outgoing frames.

``--fault drop=0.1,dup=0.1,delay=0.1`` on ``gossip node`` wraps the ZeroMQ transport in a
:class:`FaultyTransport`, so a cluster of real processes can be run under loss. Each outgoing
frame (requests and answers alike) is, independently: dropped with probability ``drop``;
otherwise sent, and sent a second time with probability ``dup``; and each copy is held back
with probability ``delay`` for a time drawn uniformly in ``[0, 2 * delay_ms]`` milliseconds,
which also reorders it against the frames sent meanwhile.

Held-back frames are timer callbacks owned by the wrapper, cancelled when it closes.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gossip.errors import ConfigError
from node.transport import Incoming, Transport

__all__ = ["FaultSpec", "FaultyTransport", "parse_faults"]


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """Probabilities of dropping, duplicating and delaying a frame; mean delay in ms."""

    drop: float = 0.0
    dup: float = 0.0
    delay: float = 0.0
    delay_ms: float = 20.0

    @property
    def active(self) -> bool:
        """True if any fault can happen."""
        return self.drop > 0 or self.dup > 0 or self.delay > 0


_KEYS = ("drop", "dup", "delay", "delay_ms")


def parse_faults(spec: str) -> FaultSpec:
    """Parse ``drop=0.1,dup=0.1,delay=0.1[,delay_ms=20]`` (any subset; ``""`` means none).

    Raises
    ------
    ConfigError
        An unknown key, a value that is not a number, or a probability outside [0, 1).

    Examples
    --------
    >>> parse_faults("drop=0.1,delay=0.2")
    FaultSpec(drop=0.1, dup=0.0, delay=0.2, delay_ms=20.0)
    """
    values: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, text = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            raise ConfigError(
                f"bad fault {item!r} in {spec!r}; use key=value with keys {', '.join(_KEYS)}, "
                "e.g. drop=0.1,dup=0.1,delay=0.1"
            )
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"fault {key} must be a number, got {text!r}") from None
        if key == "delay_ms":
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"fault delay_ms must be >= 0, got {text!r}")
        elif not 0.0 <= value < 1.0:
            raise ConfigError(f"fault {key} is a probability in [0, 1), got {text!r}")
        values[key] = value
    return FaultSpec(**values)


class FaultyTransport(Transport):
    """Wrap ``inner`` and apply ``faults`` to every frame it sends (received frames untouched).

    Faults on the sending side of both ends cover both directions of every exchange.
    """

    def __init__(self, inner: Transport, faults: FaultSpec, seed: int | None = None):
        self.inner = inner
        self.faults = faults
        self.stats = inner.stats
        self._rng = np.random.default_rng(seed)
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def address(self) -> str:
        """The inner transport's address."""
        return self.inner.address

    async def connect(self, peers: Mapping[int, str]) -> None:
        """Connect the inner transport."""
        await self.inner.connect(peers)

    @property
    def secure(self) -> bool:
        """Whether the inner transport is secure."""
        return self.inner.secure

    def trust(self, peer_keys: Mapping[int, str]) -> None:
        """Admit these peers on the inner transport."""
        self.inner.trust(peer_keys)

    def move(self, peer: int, address: str) -> bool:
        """Move the peer in the inner transport (frames held back keep their old route)."""
        return self.inner.move(peer, address)

    def redial(self, peer: int) -> bool:
        """Redial the peer in the inner transport."""
        return self.inner.redial(peer)

    def _emit(self, deliver: object, *args: object) -> None:
        f = self.faults
        rng = self._rng
        if rng.random() < f.drop:
            self.stats.dropped += 1
            return
        copies = 2 if rng.random() < f.dup else 1
        self.stats.duplicated += copies - 1
        for _ in range(copies):
            if rng.random() < f.delay:
                self.stats.delayed += 1
                self._later(float(rng.uniform(0.0, 2.0 * f.delay_ms)) / 1e3, deliver, *args)
            else:
                deliver(*args)  # type: ignore[operator]

    def _later(self, seconds: float, deliver: object, *args: object) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            deliver(*args)  # type: ignore[operator]

        handle = loop.call_later(seconds, fire)
        self._timers.add(handle)

    def send(self, peer: int, data: bytes) -> None:
        """Send through the inner transport, with faults."""
        self._emit(self.inner.send, peer, data)

    def answer(self, route: bytes, data: bytes) -> None:
        """Answer through the inner transport, with faults."""
        self._emit(self.inner.answer, route, data)

    async def recv(self) -> Incoming:
        """Receive from the inner transport."""
        return await self.inner.recv()

    async def aclose(self) -> None:
        """Cancel held-back frames and close the inner transport."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await self.inner.aclose()
