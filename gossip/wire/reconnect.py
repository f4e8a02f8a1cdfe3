"""Staying connected to the broker: the backoff policy and the reconnect loop (sans-IO).

The nodes (:mod:`node.mqtt`) and the coordinator (:mod:`coordinator.mqtt.link`) keep their MQTT
connection up the same way; this module is that way, once. The loop does no IO of its own: the
connected session, the errors that mean "the broker is gone", the wait and the stop test are
its arguments, and the jitter comes from the ``rng`` it is given.

The rules of :func:`reconnecting`:

* before each try and after each session, a stop (``ending()`` true) ends the loop: it returns;
* a session that raises one of ``retry_on`` (alone, or in an exception group, as a task group
  raises it) lost the broker: ``on_lost`` hears the first such error, then the loop waits and
  tries again; any other error, a cancel included, goes up to the caller (the retryable ones
  of a mixed group are taken first);
* a session that returns without a stop is tried again after the wait, as a lost one is;
* the ``k``-th wait after the last session that connected (or since the start) is the
  ``k``-th delay of the :class:`Backoff`: ``first`` doubling up to ``most``, times a uniform
  jitter, so that the many clients a broker restart cut off do not come back in step;
* a session says it is connected with :meth:`Attempt.connected`: the delays start over after
  it, and every later attempt is a reconnection (:attr:`Attempt.again`).

Examples
--------
>>> import random
>>> policy = Backoff(first=0.5, most=4.0)
>>> [policy.after(d) for d in (0.5, 1.0, 2.0, 4.0)]
[1.0, 2.0, 4.0, 4.0]
>>> 0.25 <= policy.jittered(0.5, random.Random(1)) <= 0.75
True
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from continuized.gossip.errors import ConfigError

__all__ = ["COORDINATOR_BACKOFF", "NODE_BACKOFF", "Attempt", "Backoff", "reconnecting"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Jittered exponential backoff: how long to wait before the next try, in seconds.

    The ``k``-th delay (``k = 0, 1, ...``) is ``min(first * factor^k, most) * U``, with ``U``
    uniform in ``[1 - jitter, 1 + jitter]``: every delay lies in
    ``[first * (1 - jitter), most * (1 + jitter)]``.

    Raises
    ------
    ConfigError
        ``first`` not positive, ``most`` below ``first``, ``factor`` below 1, or ``jitter``
        outside ``[0, 1)``.
    """

    first: float
    most: float
    factor: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not self.first > 0:
            raise ConfigError(f"backoff: first delay must be > 0, got {self.first!r}")
        if not self.most >= self.first:
            raise ConfigError(f"backoff: most ({self.most!r}) must be >= first ({self.first!r})")
        if not self.factor >= 1:
            raise ConfigError(f"backoff: factor must be >= 1, got {self.factor!r}")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"backoff: jitter must be in [0, 1), got {self.jitter!r}")

    def after(self, delay: float) -> float:
        """The delay that follows ``delay`` (before jitter): ``min(factor * delay, most)``."""
        return min(self.factor * delay, self.most)

    def jittered(self, delay: float, rng: random.Random) -> float:
        """``delay`` times a factor drawn uniformly from ``[1 - jitter, 1 + jitter]``."""
        return delay * rng.uniform(1 - self.jitter, 1 + self.jitter)


COORDINATOR_BACKOFF = Backoff(first=0.1, most=5.0)
"""The coordinator's: one client, whose absence costs the reports of every node (QoS 0: those
sent while it is away go nowhere) and holds up its commands and its status, so it tries again
soon and often."""

NODE_BACKOFF = Backoff(first=0.5, most=10.0)
"""The nodes': many clients (thousands, cut off together by a broker restart) for whom the
broker is optional (their gossip never waits for it), so they start later and wait longer than
the coordinator, and the jitter spreads their reconnections over the seconds the broker needs
to come back."""


class Attempt:
    """One try at a session, handed to the session by :func:`reconnecting`.

    ``again`` is true if an earlier session connected: this one, once connected, is a
    reconnection (the broker may have lost what was sent meanwhile).
    """

    __slots__ = ("again", "up")

    def __init__(self, again: bool) -> None:
        self.again = again
        self.up = False

    def connected(self) -> None:
        """Say that the session is connected: the backoff starts over after it ends."""
        self.up = True


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _ignore(error: BaseException) -> None:
    del error


async def reconnecting(
    session: Callable[[Attempt], Awaitable[None]],
    *,
    retry_on: type[Exception] | tuple[type[Exception], ...],
    backoff: Backoff,
    rng: random.Random,
    sleep: Callable[[float], Awaitable[None]],
    ending: Callable[[], bool],
    on_lost: Callable[[BaseException], None] = _ignore,
) -> None:
    """Run ``session`` again and again, waiting ``backoff`` between tries, until ``ending()``.

    Parameters
    ----------
    session : callable(Attempt) -> awaitable
        Connects, calls :meth:`Attempt.connected` once connected, and serves until the broker
        is lost (it raises one of ``retry_on``) or until stopped (it returns).
    retry_on : exception type or tuple of them
        The errors that mean the broker was lost (not exception groups: ``except*`` unwraps).
    backoff : Backoff
        The delays between tries.
    rng : random.Random
        Draws the jitter.
    sleep : callable(seconds) -> awaitable
        Waits (``asyncio.sleep``; a fake one in tests).
    ending : callable() -> bool
        Whether to stop; asked before each try and after each session.
    on_lost : callable(error)
        Hears the first retryable error of each lost session (to log it, say).

    Raises
    ------
    BaseException
        Whatever ``session`` or ``sleep`` raise that is not in ``retry_on``, a cancel included.
    """
    delay = backoff.first
    again = False
    while not ending():
        attempt = Attempt(again)
        try:
            await session(attempt)
        except* retry_on as group:
            on_lost(_first_leaf(group))
        if attempt.up:
            again = True
            delay = backoff.first
        if ending():
            return
        await sleep(backoff.jittered(delay, rng))
        delay = backoff.after(delay)
