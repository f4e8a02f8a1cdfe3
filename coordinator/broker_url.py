"""Broker URLs: ``mqtt[s]://[user:pass@]host[:port]``, parsed, and redacted for display."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from gossip.errors import ConfigError

__all__ = ["broker_credentials", "parse_broker_url", "redact_broker_url"]


def parse_broker_url(url: str) -> tuple[str, int]:
    """Return ``(host, port)`` of ``mqtt[s]://host[:port]`` (port 1883, or 8883 for TLS).

    Raises
    ------
    ConfigError
        Another scheme, no host, or a bad port.

    Examples
    --------
    >>> parse_broker_url("mqtt://10.0.0.2:1884")
    ('10.0.0.2', 1884)
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(
            f"broker URL {url!r} is not valid; expected mqtt://host:port or mqtts://host:port "
            "(TLS), e.g. mqtt://127.0.0.1:1883"
        )
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError:
        raise ConfigError(f"broker URL {url!r} has a bad port; expected 1..65535") from None
    return parts.hostname, port


def broker_credentials(url: str) -> tuple[str | None, str | None]:
    """Return ``(username, password)`` of ``mqtt://user:pass@host:port`` (``None`` if absent).

    A broker that refuses anonymous clients (the compose file's) is reached with credentials
    in the URL; the nodes get the same URL in their bootstrap.

    Examples
    --------
    >>> broker_credentials("mqtt://gossip:s%40cret@mosquitto:1883")
    ('gossip', 's@cret')
    >>> broker_credentials("mqtt://127.0.0.1:1883")
    (None, None)
    """
    parts = urlsplit(url.strip())
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return user, password


def redact_broker_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``, for logs, status and the dashboard.

    Examples
    --------
    >>> redact_broker_url("mqtt://gossip:secret@mosquitto:1883")
    'mqtt://gossip:***@mosquitto:1883'
    """
    parts = urlsplit(url.strip())
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return f"{parts.scheme}://{parts.username}:***@{netloc}{parts.path}"
