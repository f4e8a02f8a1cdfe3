"""The project's one exception hierarchy.

Every error the project raises on purpose derives from :class:`GossipError`. Local errors (we, or
our user, got something wrong: a bad argument, a bad configuration) are kept apart from remote
errors (a peer sent something we cannot accept). Library errors (zmq, MQTT, OS) are translated
into these at the boundary where they occur, so callers only ever catch our own types.

Messages name the bad value and say what would have been valid.

A command that needs a package of an optional extra which is not installed raises
:class:`MissingExtraError` through the one rule, :func:`require_extra`, whose message names the
extra and its pip command. ``pip install continuized-gossip`` is the lean core: what ``gossip
up``, ``gossip node``, ``gossip coordinator``, ``gossip submit`` and ``gossip keys`` run
(averaging, secure, with the embedded broker and the dashboard's page). The heavy packages come
in extras, named by what users run together (pyproject.toml):

* ``sim`` (scipy, numba): optimization problems (``gossip optimize``, ``--problem``), graphs of
  more than 1500 nodes, the compiled simulator kernels (numba stays optional: without it the
  NumPy engines give the same results, slower);
* ``data`` (scikit-learn): the bundled data sets (digits, breast-cancer, ...) and svmlight;
* ``plot`` (matplotlib): ``--plot`` and the ``gossip reproduce`` figures;
* ``dashboard`` (plotly): the dashboard's charts (plotly.js);
* ``all``: every one of them.

Whether a package is installed is asked with :func:`importlib.util.find_spec`: found on disk,
not imported, so the check costs microseconds and runs before any work.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = [
    "EXTRAS",
    "ConfigError",
    "GossipError",
    "LocalError",
    "MissingExtraError",
    "ProtocolError",
    "RemoteError",
    "TopologyError",
    "TransportError",
    "install_command",
    "missing_modules",
    "require_extra",
]


class GossipError(Exception):
    """Root of every error raised on purpose by this project."""


class LocalError(GossipError):
    """Our side broke a rule: a bad argument, option, file or configuration."""


class ConfigError(LocalError, ValueError):
    """A value given by the user (CLI option, config field, function argument) is not valid."""


class MissingExtraError(LocalError):
    """A command needs a package of an optional extra that is not installed
    (``gossip.files.extras``: the message names the extra and its pip command)."""


class TopologyError(ConfigError):
    """A topology cannot be used: unknown kind, bad size, disconnected, bad edge weights."""


class RemoteError(GossipError):
    """A peer broke a rule: it sent something malformed, unexpected or out of range."""


class ProtocolError(RemoteError):
    """A message failed validation: wrong version, unknown type, bad field, non-finite value."""


class TransportError(GossipError):
    """The network failed under us (timeout, closed socket, unreachable broker)."""


DISTRIBUTION = "continuized-gossip"

EXTRAS: dict[str, str] = {
    "sim": "SciPy for the solvers",
    "data": "scikit-learn for the bundled data sets",
    "plot": "matplotlib for figures",
    "dashboard": "aiohttp, prometheus-client and plotly",
}
"""Each extra and what it brings, as an error message names it (``all`` is every one)."""


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``.

    Examples
    --------
    >>> install_command("plot")
    "pip install 'continuized-gossip[plot]'"
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level modules of ``modules`` that cannot be imported here (found, not imported).

    Examples
    --------
    >>> missing_modules(["json", "surely_not_a_module_here"])
    ['surely_not_a_module_here']
    """
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it, or a broken entry
            found = False
        if not found:
            missing.append(name)
    return missing


def require_extra(extra: str, modules: Sequence[str], needed_by: str) -> None:
    """Raise unless every module of ``modules`` (the packages of ``extra``) is installed.

    Parameters
    ----------
    extra : str
        The extra that brings the modules: a key of :data:`EXTRAS`.
    modules : sequence of str
        The import names that ``needed_by`` needs (``sklearn``, not ``scikit-learn``).
    needed_by : str
        What needs them, as the user typed it: ``gossip optimize``, ``--plot``,
        ``--data digits``.

    Raises
    ------
    MissingExtraError
        One line: what needs which extra, what is missing, and the pip command.

    Examples
    --------
    >>> require_extra("plot", ["json"], "--plot")  # installed: nothing happens
    >>> require_extra("plot", ["surely_not_a_module_here"], "--plot")
    Traceback (most recent call last):
    ...
    continuized.gossip.errors.MissingExtraError: --plot needs matplotlib for figures \
(surely_not_a_module_here is not installed): pip install 'continuized-gossip[plot]'
    """
    if extra not in EXTRAS:
        raise ConfigError(f"unknown extra {extra!r}; valid: {', '.join(EXTRAS)}")
    missing = missing_modules(modules)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise MissingExtraError(
            f"{needed_by} needs {EXTRAS[extra]} ({', '.join(missing)} {verb} not installed): "
            f"{install_command(extra)}"
        )
