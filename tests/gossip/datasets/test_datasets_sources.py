"""The bundled classification sets read without scikit-learn are its loaders' rows, to the bit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from continuized.gossip.datasets.sources import _standardise, read_rows


@pytest.mark.parametrize("kind", ["digits", "wine", "iris"])
def test_a_bundled_set_is_what_scikit_learn_loads(kind: str) -> None:
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = getattr(datasets, f"load_{kind}")()
    rows = read_rows(kind)
    want = _standardise(np.asarray(bunch.data, dtype=np.float64))  # as the reader had it
    assert rows.A.tobytes() == want.tobytes()
    assert rows.b.tobytes() == np.asarray(bunch.target, dtype=np.float64).tobytes()


def test_reading_digits_does_not_import_scikit_learn() -> None:
    """A training node reads its rows in a process that never imports scikit-learn (its
    import alone would be most of a small node's memory)."""
    code = (
        "import sys\n"
        "from continuized.gossip.datasets.sources import read_rows\n"
        "rows = read_rows('digits')\n"
        "print(rows.A.shape, 'sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["(1797,", "64)", "False"]
