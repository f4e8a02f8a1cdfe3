"""An array pool hands an array out again only once nothing else holds it."""

from __future__ import annotations

import numpy as np

from continuized.gossip.model._arraypool import ArrayPool


def test_an_array_comes_back_only_when_unshared() -> None:
    pool = ArrayPool(4, np.float32, keep=2)
    a = pool.take()
    assert a.dtype == np.float32
    assert a.shape == (4,)
    first = id(a)
    view = a[1:]  # a view holds its base
    del a
    b = pool.take()
    assert id(b) != first
    del view
    c = pool.take()
    assert id(c) == first
    held = memoryview(c)  # so does a buffer export (a zero-copy send's)
    del c
    assert id(pool.take()) != first
    del held
    assert id(pool.take()) == first


def test_past_its_limit_the_pool_hands_out_new_arrays_and_keeps_none_of_them() -> None:
    pool = ArrayPool(3, np.float64, keep=1)
    held = [pool.take() for _ in range(4)]
    assert len({id(a) for a in held}) == 4
    assert pool.kept == 1
