"""How long a stopping coordinator waits for the members' final reports, and how it knows.

The rule, stated here once: after the stop, wait ``stop_timeout`` of *silence* plus a node's
settling time, not ``stop_timeout`` in all. A loaded cluster of a thousand nodes takes seconds
to hear the stop and more to settle (each node waits for its exchanges in flight, up to four
retry timeouts), and its finals come well after a fixed deadline. As long as members still
report they are alive and settling, so the wait goes on, up to a cap. The stop is re-sent every
second meanwhile: a node that was reconnecting to the broker when the first one went out must
not keep gossiping. Departed members are not waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from continuized.coordinator.figures.state import ClusterState

__all__ = ["NODE_SETTLE", "FinalsWait"]

_STOP_RESEND = 1.0  # seconds between two stop commands while waiting for final reports
_STOP_WAIT_CAP = 6.0  # stop_timeouts at most to wait for final reports while nodes still report
NODE_SETTLE = 8.5
"""Seconds a node may settle before its final report, at its defaults (node.daemon: a drain of
0.5 s, then its exchanges in flight for up to 4 retry timeouts of 2 s): the coordinator waits
for the finals that long on top of ``stop_timeout``. Measured on a loaded 2-core machine, 1,024
secure nodes sent theirs 13 to 17 s after the stop."""


class FinalsWait:
    """The members' final reports, counted on the cluster ``state`` of ``expected`` nodes."""

    def __init__(self, state: ClusterState, expected: int) -> None:
        self.state = state
        self.expected = expected

    def heard(self) -> int:
        """How many reports the coordinator has taken from the members: it grows while they
        live."""
        gone = self.state.departed
        return sum(v.reports for k, v in self.state.nodes.items() if k not in gone)

    def count(self) -> int:
        """How many members' final reports the coordinator holds."""
        gone = self.state.departed
        return sum(v.final for k, v in self.state.nodes.items() if k not in gone)

    def complete(self) -> bool:
        """Whether every member has sent its final report (departed nodes are not waited for)."""
        gone = self.state.departed
        return self.count() >= max(self.expected, len(self.state.initial)) - len(gone)

    async def wait(self, stop_timeout: float, send_stop: Callable[[], None]) -> float:
        """Wait for the finals by the module's rule, calling ``send_stop`` every second; return
        the seconds from the call to the last final report (to giving up, if none came)."""
        now = started = time.monotonic()
        deadline = now + stop_timeout + NODE_SETTLE
        cap = now + _STOP_WAIT_CAP * stop_timeout + NODE_SETTLE
        heard, finals, last_final = self.heard(), self.count(), now
        resend = now
        while now < deadline:
            if self.complete():
                finals, last_final = self.count(), now
                break
            if now >= resend:
                send_stop()
                resend = now + _STOP_RESEND
            await asyncio.sleep(0.02)
            now = time.monotonic()
            if self.count() != finals:
                finals, last_final = self.count(), now
            if self.heard() != heard:
                heard, deadline = self.heard(), min(cap, now + stop_timeout)
        return (last_final if finals else now) - started
