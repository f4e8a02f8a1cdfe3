"""The project's one exception hierarchy.

Every error the project raises on purpose derives from :class:`GossipError`. Local errors (we, or
our user, got something wrong: a bad argument, a bad configuration) are kept apart from remote
errors (a peer sent something we cannot accept). Library errors (zmq, MQTT, OS) are translated
into these at the boundary where they occur, so callers only ever catch our own types.

Messages name the bad value and say what would have been valid.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "GossipError",
    "LocalError",
    "ProtocolError",
    "RemoteError",
    "TopologyError",
    "TransportError",
]


class GossipError(Exception):
    """Root of every error raised on purpose by this project."""


class LocalError(GossipError):
    """Our side broke a rule: a bad argument, option, file or configuration."""


class ConfigError(LocalError, ValueError):
    """A value given by the user (CLI option, config field, function argument) is not valid."""


class TopologyError(ConfigError):
    """A topology cannot be used: unknown kind, bad size, disconnected, bad edge weights."""


class RemoteError(GossipError):
    """A peer broke a rule: it sent something malformed, unexpected or out of range."""


class ProtocolError(RemoteError):
    """A message failed validation: wrong version, unknown type, bad field, non-finite value."""


class TransportError(GossipError):
    """The network failed under us (timeout, closed socket, unreachable broker)."""
