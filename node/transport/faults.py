"""Fault injection: a transport wrapper that drops, duplicates and delays outgoing frames.

``--fault drop=0.1,dup=0.1,delay=0.1`` on ``gossip node`` wraps the ZeroMQ transport in a
:class:`FaultyTransport`, so a cluster of real processes can be run under loss. Each outgoing
frame (requests and answers alike) is, independently: dropped with probability ``drop``;
otherwise sent, and sent a second time with probability ``dup``; and each copy is held back
with probability ``delay`` for a time drawn uniformly in ``[0, 2 * delay_ms]`` milliseconds,
which also reorders it against the frames sent meanwhile.

A LAN, emulated (``latency_ms=1,jitter_ms=0.2,drop=0.001``): every frame is held for
``latency_ms`` plus a jitter uniform in ``[-jitter_ms, +jitter_ms]`` (never below 0), and
frames toward one destination keep their order, as on one TCP connection: a frame is never
released before the one sent ahead of it. Both ends delay what they send, so a round trip
costs ``2 * latency_ms``.

A skewed wall clock (``offset_ms=40`` exactly, or ``skew_ms=50``: an offset drawn uniformly in
``[-skew_ms, +skew_ms]`` from the node's seed, so one per process, a "host") is not a transport
fault: :meth:`FaultSpec.clock_offset` gives it, and the node adds it to every reading of its
clock, as a host whose clock is not synchronised would.

Held-back frames are timer callbacks owned by the wrapper, cancelled when it closes.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.schema import Frame
from continuized.node.transport.interface import FrameHandler, Incoming, Transport

__all__ = ["FaultSpec", "FaultyTransport", "parse_faults"]


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """Probabilities of dropping, duplicating and delaying a frame; mean delay in ms; a LAN's
    one-way latency and jitter (ms, every frame, order kept); the wall clock's offset (ms,
    exact) or its seeded bound (ms)."""

    drop: float = 0.0
    dup: float = 0.0
    delay: float = 0.0
    delay_ms: float = 20.0
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    offset_ms: float = 0.0
    skew_ms: float = 0.0

    @property
    def active(self) -> bool:
        """True if any transport fault can happen (a clock offset is not one)."""
        return (
            self.drop > 0
            or self.dup > 0
            or self.delay > 0
            or self.latency_ms > 0
            or self.jitter_ms > 0
        )

    def clock_offset(self, seed: int | None, name: str = "") -> float:
        """The offset (seconds) to add to this process's wall clock: ``offset_ms``, plus one
        draw uniform in ``[-skew_ms, +skew_ms]`` from ``seed`` (``None``: from ``name``, so
        that a host started without a seed still draws the same offset every run).

        Examples
        --------
        >>> FaultSpec(offset_ms=40).clock_offset(None, "pi-3")
        0.04
        >>> abs(FaultSpec(skew_ms=5).clock_offset(7)) <= 0.005
        True
        """
        drawn = 0.0
        if self.skew_ms > 0:
            # Its own stream: the Poisson clock and the frame faults draw from `seed` too.
            key = zlib.crc32(name.encode()) if seed is None else seed
            rng = np.random.default_rng([key, 0x5EED])
            drawn = float(rng.uniform(-self.skew_ms, self.skew_ms))
        return (self.offset_ms + drawn) / 1e3


TIMER_LEAD = 0.0005
"""Seconds a held frame's timer is set ahead of its time: asyncio's epoll waits whole
milliseconds, rounded up, so a timer fires up to 1 ms late; half a millisecond early centres
the error (measured by ping-pong in benchmarks/bench_lan.py). Sub-millisecond latencies are
therefore not emulated faithfully: they come out near loopback's."""

_KEYS = ("drop", "dup", "delay", "delay_ms", "latency_ms", "jitter_ms", "offset_ms", "skew_ms")
_MILLISECONDS = ("delay_ms", "latency_ms", "jitter_ms", "skew_ms")


def parse_faults(spec: str) -> FaultSpec:
    """Parse ``drop=0.1,dup=0.1,delay=0.1[,delay_ms=20]`` and
    ``latency_ms=1,jitter_ms=0.2,offset_ms=40,skew_ms=5`` (any subset; ``""`` means none).

    Raises
    ------
    ConfigError
        An unknown key, a value that is not a number, a probability outside [0, 1), or a
        negative (or infinite) duration.

    Examples
    --------
    >>> spec = parse_faults("drop=0.1,delay=0.2,latency_ms=1")
    >>> spec.drop, spec.delay, spec.delay_ms, spec.latency_ms
    (0.1, 0.2, 20.0, 1.0)
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
        if key in _MILLISECONDS:
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"fault {key} must be >= 0 (milliseconds), got {text!r}")
        elif key == "offset_ms":
            if not math.isfinite(value):
                raise ConfigError(f"fault offset_ms must be a finite number, got {text!r}")
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
        # Per destination (a peer, or an answer's route): when its last frame leaves (loop
        # time), so that a LAN's jitter never reorders one connection's frames.
        self._released: dict[object, float] = {}

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

    def set_handler(self, handler: FrameHandler | None) -> bool:
        """Received frames are not faulted: hand them straight to the inner transport's."""
        return self.inner.set_handler(handler)

    def _emit(self, deliver: object, where: object, *args: object) -> None:
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
            elif f.latency_ms > 0 or f.jitter_ms > 0:
                self._on_the_wire(where, deliver, *args)
            else:
                deliver(*args)  # type: ignore[operator]

    def _on_the_wire(self, where: object, deliver: object, *args: object) -> None:
        """Hold a frame for the LAN's latency and jitter, behind the ones sent before it."""
        f = self.faults
        hold = f.latency_ms + float(self._rng.uniform(-f.jitter_ms, f.jitter_ms))
        loop = asyncio.get_running_loop()
        # Strictly after the one ahead: the loop runs timers due at the same time in any order.
        due = max(loop.time() + max(hold, 0.0) / 1e3, self._released.get(where, -math.inf) + 1e-7)
        self._released[where] = due
        self._at(loop, due - TIMER_LEAD, deliver, *args)

    def _later(self, seconds: float, deliver: object, *args: object) -> None:
        loop = asyncio.get_running_loop()
        self._at(loop, loop.time() + seconds, deliver, *args)

    def _at(
        self, loop: asyncio.AbstractEventLoop, when: float, deliver: object, *args: object
    ) -> None:
        def fire() -> None:
            self._timers.discard(handle)
            deliver(*args)  # type: ignore[operator]

        handle = loop.call_at(when, fire)
        self._timers.add(handle)

    def send(self, peer: int, data: Frame) -> None:
        """Send through the inner transport, with faults."""
        self._emit(self.inner.send, peer, peer, data)

    def answer(self, route: bytes, data: Frame) -> None:
        """Answer through the inner transport, with faults."""
        self._emit(self.inner.answer, route, route, data)

    def when_sent(self, work: Callable[[], None]) -> None:
        """Run ``work`` when the inner transport has sent what it was given (frames held
        back here are not waited for: the work may run before them)."""
        self.inner.when_sent(work)

    async def recv(self) -> Incoming:
        """Receive from the inner transport."""
        return await self.inner.recv()

    async def aclose(self) -> None:
        """Cancel held-back frames and close the inner transport."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await self.inner.aclose()
