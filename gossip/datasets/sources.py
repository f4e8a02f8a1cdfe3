"""Where the rows come from: a data spec such as ``breast-cancer`` or ``svmlight:PATH``.

=================================  ==============================================================
``breast-cancer``                  scikit-learn's bundled Wisconsin set (569 x 30, targets 0/1)
``diabetes``                       scikit-learn's bundled diabetes set (442 x 10, real targets)
``digits``                         scikit-learn's bundled 8x8 digits (1797 x 64, classes 0-9)
``wine``                           scikit-learn's bundled wine set (178 x 13, classes 0-2)
``iris``                           scikit-learn's bundled iris set (150 x 4, classes 0-2)
``svmlight:PATH``                  a LIBSVM/svmlight file (a9a, w8a ...), read densely
``npz:PATH``                       a numpy ``.npz`` holding arrays ``X`` (m, d) and ``y`` (m,)
``csv:FILE``                       no header; column 0 the node id, then features, target last
``csv:DIR``                        ``DIR/node-0.csv``, ``node-1.csv`` ...: features then target
                                   last, no header; node ``v`` reads only its own file
``synthetic:SEED[:ROWSxDIM]``      Gaussian features, ``y = A w + N(0, 1)``, seeded
                                   (default ``1000x10``)
=================================  ==============================================================

The bundled sets ship with scikit-learn (no download); their features are standardised
(zero mean, unit variance per column, over the whole set) so that ``L`` stays moderate. Other
sources are used as they are. ``csv:FILE`` and ``csv:DIR`` are already split by node.
"""

from __future__ import annotations

import importlib.util
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from continuized.gossip.datasets.shard import FloatArray, Shard
from continuized.gossip.errors import ConfigError, require_extra

__all__ = ["DATA_KINDS", "Rows", "node_file", "read_node_file", "read_rows", "require_source"]

DATA_KINDS = (
    "breast-cancer",
    "diabetes",
    "digits",
    "wine",
    "iris",
    "svmlight:PATH",
    "npz:PATH",
    "csv:FILE",
    "csv:DIR",
    "synthetic:SEED[:ROWSxDIM]",
)
_VALID = "valid data sets: " + ", ".join(DATA_KINDS)


@dataclass(frozen=True, eq=False)
class Rows:
    """A whole data set (``nodes`` is set when the source itself says which node owns a row)."""

    A: FloatArray
    b: FloatArray
    description: str
    nodes: np.ndarray | None = None


def _standardise(A: FloatArray) -> FloatArray:
    scale = A.std(axis=0)
    scale[scale == 0] = 1.0  # a constant column stays 0 rather than dividing by 0
    return np.asarray((A - A.mean(axis=0)) / scale, dtype=np.float64)


def _path(arg: str, spec: str) -> Path:
    path = Path(arg).expanduser()
    if not arg or not path.exists():
        raise ConfigError(f"data set {spec!r}: no such file or directory {arg!r}")
    return path


def _synthetic(arg: str, spec: str) -> Rows:
    seed_text, _, shape = arg.partition(":")
    try:
        seed = int(seed_text)
        rows, dim = (int(t) for t in shape.lower().split("x")) if shape else (1000, 10)
    except ValueError:
        raise ConfigError(
            f"data set {spec!r}: expected synthetic:SEED or synthetic:SEED:ROWSxDIM with "
            "integers, e.g. synthetic:0:500x5"
        ) from None
    if seed < 0 or rows < 1 or dim < 1:
        raise ConfigError(f"data set {spec!r}: need SEED >= 0, ROWS >= 1 and DIM >= 1")
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((rows, dim))
    b = A @ rng.standard_normal(dim) + rng.standard_normal(rows)
    return Rows(A, b, f"synthetic (seed {seed}): {rows} x {dim}, y = A w + N(0, 1)")


def _load_csv(path: Path, spec: str) -> FloatArray:
    try:
        data = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise ConfigError(f"data set {spec!r}: {path} is not numeric CSV ({exc})") from None
    return np.asarray(data, dtype=np.float64)


_CLASSIFICATION = ("digits", "wine", "iris")


# The bundled classification sets' files in scikit-learn's package: features then the class,
# comma-separated; ``header`` says whether a first line gives the shape and class names.
_BUNDLED_FILES = {
    "digits": ("digits.csv.gz", False),
    "wine": ("wine_data.csv", True),
    "iris": ("iris.csv", True),
}


def _bundled_file(kind: str) -> tuple[FloatArray, FloatArray] | None:
    """The features and classes of a bundled set, read from scikit-learn's own data file
    without importing scikit-learn, or None if that file is not where it should be.

    Importing scikit-learn to read 1797 rows makes a process 70 MB larger, and every training
    node reads its data: on a Raspberry Pi that is most of a node's memory. The file is the
    one scikit-learn's loader reads, so the rows are the same to the bit (a test checks).
    """
    name, header = _BUNDLED_FILES[kind]
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "datasets" / "data" / name
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1 if header else 0, ndmin=2)
    except (OSError, ValueError):
        return None
    return table[:, :-1].astype(np.float64), table[:, -1].astype(np.int64).astype(np.float64)


def _bundled_classes(kind: str) -> Rows:
    rows = _bundled_file(kind)
    if rows is None:  # another layout of scikit-learn's package: its loader knows it
        from sklearn import datasets as skd

        loader = {"digits": skd.load_digits, "wine": skd.load_wine, "iris": skd.load_iris}[kind]
        bunch = loader()
        rows = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, np.float64)
    A = _standardise(rows[0])
    b = rows[1]
    classes = len(np.unique(b))
    return Rows(
        A, b, f"{kind}: {A.shape[0]} x {A.shape[1]}, standardised features, {classes} classes"
    )


_SKLEARN_KINDS = ("breast-cancer", "diabetes", *_CLASSIFICATION, "svmlight")
"""The data sets that scikit-learn brings (the ``data`` extra): its bundled files, its reader."""


def require_source(spec: str, needed_by: str | None = None) -> None:
    """Raise unless the packages that read the data set ``spec`` are installed.

    ``needed_by`` names it in the message (default ``--data SPEC``).

    Raises
    ------
    MissingExtraError
        ``spec`` is a bundled set or svmlight and scikit-learn is not installed.
    """
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "svmlight" or (kind in _SKLEARN_KINDS and not arg):
        require_extra("data", ["sklearn"], needed_by or f"--data {spec}")


def read_rows(spec: str) -> Rows:
    """Every row of the data set ``spec`` (not ``csv:DIR``, which is read per node)."""
    require_source(spec, f"data set {spec!r}")
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind in ("breast-cancer", "diabetes") and not arg:
        from sklearn import datasets as skd

        bunch = skd.load_breast_cancer() if kind == "breast-cancer" else skd.load_diabetes()
        A = _standardise(np.asarray(bunch.data, dtype=np.float64))
        b = np.asarray(bunch.target, dtype=np.float64)
        what = "targets 0/1" if kind == "breast-cancer" else "real targets"
        return Rows(A, b, f"{kind}: {A.shape[0]} x {A.shape[1]}, standardised features, {what}")
    if kind in _CLASSIFICATION and not arg:
        return _bundled_classes(kind)
    if kind == "svmlight":
        from sklearn.datasets import load_svmlight_file

        try:
            X, y = load_svmlight_file(str(_path(arg, spec)))
        except ValueError as exc:
            raise ConfigError(f"data set {spec!r}: not an svmlight file ({exc})") from None
        A = np.asarray(X.toarray(), dtype=np.float64)
        return Rows(A, np.asarray(y, dtype=np.float64), f"{arg}: {A.shape[0]} x {A.shape[1]}")
    if kind == "npz":
        A, b = _read_npz(_path(arg, spec), spec)
        return Rows(A, b, f"{arg}: {A.shape[0]} x {A.shape[1] if A.ndim == 2 else '?'}")
    if kind == "csv" and arg and not Path(arg).is_dir():
        data = _load_csv(_path(arg, spec), spec)
        if data.shape[1] < 3:
            raise ConfigError(
                f"data set {spec!r}: needs >= 3 columns (node, features..., target), "
                f"got {data.shape[1]}"
            )
        ids = data[:, 0]
        if not (np.isfinite(ids).all() and (ids == np.round(ids)).all() and (ids >= 0).all()):
            raise ConfigError(f"data set {spec!r}: column 0 must hold node ids 0, 1, 2 ...")
        A = data[:, 1:-1]
        return Rows(A, data[:, -1], f"{arg}: {len(A)} x {A.shape[1]}", ids.astype(np.intp))
    if kind == "synthetic":
        return _synthetic(arg, spec)
    raise ConfigError(f"unknown data set {spec!r}; {_VALID}")


def _read_npz(path: Path, spec: str) -> tuple[FloatArray, FloatArray]:
    """Arrays ``X`` and ``y`` of a numpy ``.npz`` file, or a ConfigError naming the file."""
    expected = "expected a numpy .npz archive (np.savez) holding arrays 'X' (m, d) and 'y' (m,)"
    try:
        # allow_pickle=False: a data file never runs code, and a pickle is not an .npz either.
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        # numpy's own words ("pickled data") mislead for a text file: name the format instead.
        raise ConfigError(f"data set {spec!r}: {path} is not an .npz file; {expected}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array
        raise ConfigError(
            f"data set {spec!r}: {path} holds one array (.npy), not an .npz; {expected}"
        )
    with loaded as npz:
        if "X" not in npz or "y" not in npz:
            raise ConfigError(
                f"data set {spec!r}: needs arrays 'X' and 'y', found {sorted(npz.files)}"
            )
        try:
            return np.asarray(npz["X"], np.float64), np.asarray(npz["y"], np.float64)
        except (ValueError, TypeError, zipfile.BadZipFile) as exc:
            raise ConfigError(
                f"data set {spec!r}: arrays 'X' and 'y' of {path} must be numbers ({exc})"
            ) from None


def node_file(spec: str) -> Path | None:
    """The directory of a ``csv:DIR`` spec, or None for every other spec."""
    kind, _, arg = spec.strip().partition(":")
    if kind.lower() == "csv" and arg and Path(arg).expanduser().is_dir():
        return Path(arg).expanduser()
    return None


def read_node_file(directory: Path, v: int) -> Shard:
    """Node ``v``'s own ``DIR/node-v.csv`` (features, then the target in the last column)."""
    path = directory / f"node-{v}.csv"
    if not path.is_file():
        raise ConfigError(f"data set csv:{directory}: node {v} has no file {path.name}")
    data = _load_csv(path, f"csv:{directory}")
    if data.shape[1] < 2:
        raise ConfigError(f"{path}: needs >= 2 columns (features..., target), got {data.shape[1]}")
    return Shard.of(data[:, :-1], data[:, -1], name=f"node {v} ({path.name})")
