"""Initial node values from a short spec: ``onehot``, ``gaussian:SEED``, ``file:PATH`` ...

==================  ====================================================================
``onehot``          node 0 holds 1 (every component), every other node 0 (the paper's setting)
``onehot:K``        node K holds 1, every other node 0
``gaussian[:SEED]`` independent standard normal values, seeded
``uniform[:SEED]``  independent values uniform on [0, 1), seeded
``file:PATH``       one node per line: a number, or ``dim`` comma-separated numbers;
                    blank lines and ``#`` comments are skipped
==================  ====================================================================

Reading ``file:PATH`` is the one piece of I/O in this module; every other spec is pure.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["VALUE_KINDS", "error_floor", "initial_values"]

VALUE_KINDS = ("onehot", "onehot:K", "gaussian:SEED", "uniform:SEED", "file:PATH")

_VALID = "valid specs: " + ", ".join(VALUE_KINDS)


def initial_values(
    spec: str, n: int, dim: int = 1, rng_seed_default: int = 0
) -> NDArray[np.float64]:
    """Return the initial values described by ``spec`` for ``n`` nodes.

    Parameters
    ----------
    spec : str
        One of the specs in the module docstring.
    n : int
        Number of nodes, ``>= 1``.
    dim : int
        Number of components of each node's value, ``>= 1``.
    rng_seed_default : int
        Seed used by ``gaussian`` and ``uniform`` when the spec gives none.

    Returns
    -------
    ndarray
        Shape ``(n,)`` if ``dim == 1``, else ``(n, dim)``; finite float64.

    Raises
    ------
    ConfigError
        An unknown or malformed spec, a node index out of range, a missing or malformed file, or
        a file whose line count or component count does not match ``n`` and ``dim``.

    Examples
    --------
    >>> initial_values("onehot:2", 4).tolist()
    [0.0, 0.0, 1.0, 0.0]
    >>> initial_values("onehot", 2, dim=2).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"the number of nodes must be an integer >= 1, got {n!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ConfigError(f"the value dimension must be an integer >= 1, got {dim!r}")
    kind, sep, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "onehot":
        node = _int_arg(arg, spec, "node index") if sep else 0
        if not 0 <= node < n:
            raise ConfigError(f"initial values {spec!r}: node index must be in [0, {n - 1}]")
        values = np.zeros((n, dim), dtype=np.float64)
        values[node] = 1.0
    elif kind in ("gaussian", "uniform"):
        seed = _int_arg(arg, spec, "seed") if sep else rng_seed_default
        if seed < 0:
            raise ConfigError(f"initial values {spec!r}: the seed must be >= 0, got {seed}")
        rng = np.random.default_rng(seed)
        values = rng.standard_normal((n, dim)) if kind == "gaussian" else rng.random((n, dim))
    elif kind == "file":
        if not arg:
            raise ConfigError(f"initial values {spec!r}: missing path, e.g. file:values.txt")
        values = _read_file(Path(arg).expanduser(), spec, n, dim)
    else:
        raise ConfigError(f"unknown initial values {spec!r}; {_VALID}")
    return values[:, 0].copy() if dim == 1 else values


def _int_arg(text: str, spec: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"initial values {spec!r}: the {what} must be an integer, got {text!r}; {_VALID}"
        ) from None


def _read_file(path: Path, spec: str, n: int, dim: int) -> NDArray[np.float64]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"initial values {spec!r}: cannot read {str(path)!r}: {exc}") from None
    rows: list[list[float]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        words = [w.strip() for w in content.split(",")]
        if len(words) != dim:
            raise ConfigError(
                f"initial values {spec!r}: line {lineno} has {len(words)} component(s), "
                f"expected {dim} (the value dimension)"
            )
        try:
            row = [float(w) for w in words]
        except ValueError:
            raise ConfigError(
                f"initial values {spec!r}: line {lineno} is {content!r}; expected numbers"
            ) from None
        if not all(math.isfinite(v) for v in row):
            raise ConfigError(f"initial values {spec!r}: line {lineno} is not finite: {content!r}")
        rows.append(row)
    if len(rows) != n:
        raise ConfigError(
            f"initial values {spec!r}: the file has {len(rows)} value(s), expected one per node "
            f"({n})"
        )
    return np.array(rows, dtype=np.float64).reshape(n, dim)


def error_floor(values: ArrayLike) -> float:
    """Return the smallest non-zero error that float64 can hold near these values' mean.

    Once gossip has brought every value to the mean, the values differ from it by rounding
    only, one unit in the last place (ulp) of the values' size at the least: one node off by
    one ulp is an error of ``ulp^2 / 2``. A target eps below this is reached only when every
    value equals the mean *exactly* in float, which happens or not by chance.

    Examples
    --------
    >>> error_floor([[1.0], [0.0], [0.0]])  # ulp(1) = 2^-52
    2.465190328815662e-32
    """
    array = np.abs(np.asarray(values, dtype=np.float64))
    scale = float(array.max()) if array.size else 0.0
    return 0.5 * math.ulp(scale) ** 2 if scale > 0 else 0.0
