"""The system tools the live tests need, found or refused once.

A module of its own, not conftest.py: ``from conftest import ...`` resolves to whichever
conftest.py pytest imported last (tests/coordinator/dashboard/ has one too), so a test
collected after it would import the wrong one.
"""

from __future__ import annotations

import os

import pytest

from continuized.coordinator.local.broker import find_mosquitto

__all__ = ["require_mosquitto"]


def require_mosquitto() -> str:
    """Return the mosquitto binary; skip without it, except under CI where it must exist."""
    binary = find_mosquitto()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")
    return binary
