"""Helpers of the dashboard tests: system dependencies, promtool, and a headless Chromium.

The browser is Debian's ``/usr/bin/chromium`` driven by playwright with a fresh profile; no
browser is ever downloaded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def need(binary: str) -> str:
    """Return the path of ``binary``; skip without it, but fail under CI=true."""
    path = shutil.which(binary) or (binary if os.path.isfile(binary) else None)
    if path is None:
        message = f"{binary} is not installed (bash scripts/system-deps installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def promtool_problems(exposition: str) -> list[str]:
    """Return the problems ``promtool check metrics`` finds in ``exposition`` (Prometheus text).

    Skips without promtool (Debian's prometheus package), but fails under CI=true. A text that
    promtool cannot parse at all fails the test.
    """
    done = subprocess.run(
        [need("promtool"), "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        check=False,
    )
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    # 0: clean; 3: lint problems; anything else (1: a parse error) is not a lint verdict.
    assert done.returncode in (0, 3), f"promtool exited {done.returncode}: {said}"
    assert (done.returncode == 3) == bool(said), said
    return said


@dataclass
class Tab:
    """An open page and what it logged."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)

    def errors(self) -> list[tuple[str, str]]:
        """Console errors and uncaught exceptions."""
        return [(kind, text) for kind, text in self.console if kind in ("error", "pageerror")]


@contextlib.asynccontextmanager
async def chromium_tab(width: int = 1400, height: int = 1300) -> AsyncIterator[Tab]:
    """Open one tab of a headless Chromium with a fresh user-data-dir."""
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="gossip-chromium-") as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": width, "height": height},
            )
            try:
                page = context.pages[0] if context.pages else await context.new_page()
                tab = Tab(page)
                page.on("console", lambda msg: tab.console.append((msg.type, msg.text)))
                page.on("pageerror", lambda exc: tab.console.append(("pageerror", str(exc))))
                yield tab
            finally:
                await context.close()
