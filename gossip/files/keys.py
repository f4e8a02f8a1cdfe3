"""Key material of a secured cluster: CURVE identities, the allow-list, MQTT passwords.

Layout written by ``gossip keys init --dir DIR --nodes N`` (directories 0700, secrets 0600)::

    DIR/coordinator/identity.json   {"name": "coordinator", "public": Z85}
    DIR/coordinator/secret.key      the coordinator's CURVE secret key (Z85)
    DIR/coordinator/allow.json      {"node-0": Z85, ...}: the public keys of the cluster's nodes
    DIR/coordinator/mqtt.secret     the secret every MQTT password is derived from
    DIR/node-K/identity.json        {"name": "node-K", "public": Z85, "coordinator": Z85}
    DIR/node-K/secret.key           node K's CURVE secret key
    DIR/mqtt/passwd, DIR/mqtt/acl   for the broker (see :mod:`coordinator.mqtt.auth`)

A node's *name* is bound to its key: the coordinator only accepts a registration under the name
the allow-list gives the key it was authenticated with. Every MQTT password derives from the one
secret in ``mqtt.secret`` (the rule, and who may do what: :mod:`gossip.wire.access`).

Pure file handling: no sockets, no clock. Key pairs are made by the caller (``zmq.curve_keypair``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.access import COORDINATOR

__all__ = [
    "COORDINATOR",
    "Identity",
    "KeyPair",
    "check_key",
    "init_keys",
    "load_allow_list",
    "load_identity",
    "load_mqtt_secret",
    "write_identity",
]

KeyPair = Callable[[], tuple[bytes, bytes]]
"""Makes one ``(public, secret)`` CURVE key pair, Z85-encoded (``zmq.curve_keypair``)."""

_Z85 = re.compile(r"^[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_INIT_HINT = "create them with `gossip keys init --dir DIR --nodes N`"


@dataclass(frozen=True, slots=True)
class Identity:
    """One party's CURVE identity, loaded from its key directory.

    Attributes
    ----------
    name : str
        ``coordinator`` or the node's name (``node-3``).
    public, secret : str
        Its Z85 key pair.
    coordinator : str
        A node's copy of the coordinator's public key (the coordinator's own, for itself).
    """

    name: str
    public: str
    secret: str
    coordinator: str


def check_key(key: object, where: str) -> str:
    """Return ``key`` if it is a Z85 CURVE key (40 characters), else raise ConfigError.

    Examples
    --------
    >>> check_key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "example")
    'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'
    """
    if not isinstance(key, str) or not _Z85.match(key):
        raise ConfigError(f"{where} is not a CURVE key (40 Z85 characters), got {key!r}")
    return key


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _write(path: Path, text: str, mode: int) -> None:
    # Created with its final mode: a secret is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(mode)


def write_identity(directory: Path, identity: Identity) -> None:
    """Write ``identity`` into ``directory`` (0700): ``identity.json`` and ``secret.key`` (0600)."""
    _private_dir(directory)
    public = {"name": identity.name, "public": identity.public, "coordinator": identity.coordinator}
    _write(directory / "identity.json", json.dumps(public, indent=1) + "\n", 0o644)
    _write(directory / "secret.key", identity.secret + "\n", 0o600)


def init_keys(
    directory: Path,
    names: list[str],
    keypair: KeyPair,
    *,
    force: bool = False,
    node_root: Path | None = None,
) -> dict[str, Identity]:
    """Create the key material of a cluster of ``names`` under ``directory`` (see the header).

    Returns every identity by name (the coordinator's under :data:`COORDINATOR`). The node key
    directories go under ``node_root`` if given (a key pool, :mod:`node.transport.keypool`), else
    under ``directory``.

    Raises
    ------
    ConfigError
        A bad or repeated name, or ``directory`` already holds keys and ``force`` is off.
    """
    for name in names:
        if not _NAME.match(name) or name == COORDINATOR:
            raise ConfigError(
                f"node name {name!r} is not valid; use 1 to 200 letters, digits, '_', '.', '-' "
                f"(not {COORDINATOR!r})"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"node names must be distinct, got {names!r}")
    if (directory / COORDINATOR / "secret.key").exists() and not force:
        raise ConfigError(
            f"{directory} already holds keys; pass --force to replace them (every node then "
            "needs its new key)"
        )
    _private_dir(directory)
    if node_root is not None:
        _private_dir(node_root)

    def make(name: str, coordinator: str) -> Identity:
        public, secret = keypair()
        return Identity(name, public.decode("ascii"), secret.decode("ascii"), coordinator)

    coord = make(COORDINATOR, "")
    coord = Identity(coord.name, coord.public, coord.secret, coord.public)
    out = {COORDINATOR: coord}
    write_identity(directory / COORDINATOR, coord)
    for name in names:
        out[name] = make(name, coord.public)
        write_identity((node_root or directory) / name, out[name])
    allow = {name: out[name].public for name in names}
    _write(directory / COORDINATOR / "allow.json", json.dumps(allow, indent=1) + "\n", 0o644)
    _write(directory / COORDINATOR / "mqtt.secret", secrets.token_hex(32) + "\n", 0o600)
    return out


def _read_secret(path: Path, what: str) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"no {what} at {path}; {_INIT_HINT}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the {what} {path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"run `chmod 600 {path}`"
        )
    return _read(path, what).strip()


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"no {what} at {path}; {_INIT_HINT}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror}") from None


def _read_json(path: Path, what: str) -> object:
    text = _read(path, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the {what} {path} is not valid JSON: {exc}") from None


def load_identity(directory: Path) -> Identity:
    """Load the identity in ``directory`` (written by :func:`write_identity`).

    Raises
    ------
    ConfigError
        The directory or a file is missing or unreadable, the secret key is readable by others,
        or a key is malformed; the message names the file.
    """
    if not directory.is_dir():
        raise ConfigError(f"no key directory at {directory}; {_INIT_HINT}")
    path = directory / "identity.json"
    data = _read_json(path, "identity file")
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise ConfigError(f"the identity file {path} must hold name, public and coordinator")
    public = check_key(data.get("public"), f"'public' in {path}")
    coordinator = check_key(data.get("coordinator"), f"'coordinator' in {path}")
    secret = check_key(_read_secret(directory / "secret.key", "secret key"), "secret.key")
    return Identity(str(data["name"]), public, secret, coordinator)


def load_allow_list(path: Path) -> dict[str, str]:
    """Load the allow-list (node name -> Z85 public key) at ``path``.

    Raises
    ------
    ConfigError
        Missing, unreadable, not a JSON object of names to keys, or a key given twice.
    """
    data = _read_json(path, "allow-list")
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"the allow-list {path} must be a JSON object of node name -> key")
    out = {
        str(name): check_key(key, f"the key of {name!r} in {path}") for name, key in data.items()
    }
    if len(set(out.values())) != len(out):
        raise ConfigError(f"the allow-list {path} gives the same key to two nodes")
    return out


def load_mqtt_secret(path: Path) -> str:
    """Load the secret MQTT passwords derive from (0600, see
    :func:`gossip.wire.access.mqtt_password`)."""
    secret = _read_secret(path, "MQTT secret")
    if len(secret) < 16:
        raise ConfigError(f"the MQTT secret {path} is too short (at least 16 characters)")
    return secret
