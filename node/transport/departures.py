"""When a zero-copy frame has left the process: work to run once the bytes are on their way.

A model's exchange sends megabytes without copying them
(:meth:`node.transport.zeromq.ZmqTransport.send`): ZeroMQ's I/O thread writes the arrays' own
buffers into the socket after ``send`` returns. Where a node has one core, as on a machine
whose other cores run other work, or in a benchmark pinned to a core, that thread shares the
core with the node's event loop. The ledger's deferred booking
(:meth:`gossip.exchange.exchanger.Exchanger.settle`, a few passes over the model's float64 rows)
run right after the send then holds the frame back: measured on a million float32 parameters,
an exchange took 15 ms with the booking right after each send and 11.5 ms with it after the
frame had left (raw pyzmq moved the same bytes in 5.5 ms).

:class:`Departures` runs such work once ZeroMQ has released the last frame sent (pyzmq's
``MessageTracker``), checking every :data:`POLL_SECONDS` and at most :data:`MAX_WAIT_SECONDS`
after it was asked: a frame queued for a peer that never reads would hold the work forever.
The work must be safe to run late, or not at all: the ledger's booking is (every read of the
ledger books what is pending first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq

__all__ = ["MAX_WAIT_SECONDS", "POLL_SECONDS", "Departures"]

POLL_SECONDS = 0.0005
"""How often a frame still in ZeroMQ's hands is checked (the event loop's epoll rounds waits
up to whole milliseconds, so this is about 1 ms)."""

MAX_WAIT_SECONDS = 0.05
"""The longest the work waits for a frame: then it runs anyway (a peer that does not read)."""


class Departures:
    """The last zero-copy frame sent, and the work to run once it has gone.

    Examples
    --------
    >>> departures = Departures()
    >>> departures.then(lambda: print("now: nothing is tracked"))
    now: nothing is tracked
    """

    def __init__(self) -> None:
        self._tracker: zmq.MessageTracker | None = None
        self._work: list[Callable[[], None]] = []
        self._poll: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def track(self, tracker: zmq.MessageTracker | None) -> None:
        """Follow ``tracker``, the last frame sent (its earlier parts and frames go first);
        ``None``: a send that was not tracked."""
        if tracker is not None and not tracker.done:  # a copied frame's tracker is done
            self._tracker = tracker

    def then(self, work: Callable[[], None]) -> None:
        """Run ``work`` once the last tracked frame has left: now if it has, else from the
        event loop (once, however often it is asked before then)."""
        tracker = self._tracker
        if tracker is None or tracker.done:
            self._tracker = None
            work()
            return
        if work not in self._work:
            self._work.append(work)
        if self._poll is None:
            loop = asyncio.get_running_loop()
            self._deadline = loop.time() + MAX_WAIT_SECONDS
            self._poll = loop.call_later(POLL_SECONDS, self._check)

    @property
    def waiting(self) -> int:
        """Pieces of work waiting for a frame to leave."""
        return len(self._work)

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        tracker = self._tracker
        if tracker is not None and not tracker.done and loop.time() < self._deadline:
            self._poll = loop.call_later(POLL_SECONDS, self._check)
            return
        self._poll, self._tracker = None, None
        work, self._work = self._work, []
        for piece in work:
            piece()

    def close(self) -> None:
        """Forget the frame and the work (the sockets are closing)."""
        if self._poll is not None:
            self._poll.cancel()
        self._poll, self._tracker, self._work = None, None, []
