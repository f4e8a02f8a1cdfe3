"""One activation of each decentralized optimizer, as pure functions of the two ends' values.

The simulator (:mod:`gossip.dual.engine`) and, later, a live node call these same functions.

Dual coordinate descent (acd, cd)
---------------------------------
On activation of e = {v, w} at time T, each end first mixes its own ``(y, z)`` to T
(:func:`gossip.model.mixing.mix` at rate ``eta``; cd has ``eta = 0`` and no z), computes its primal
estimate ``g = grad f^*(y)`` from its own problem only, and the two exchange their ``g``. The
update is an antisymmetric *flow*, in the same form as gossip's jump
(:func:`gossip.model.jumps.edge_flow`): into v flows ``(s_e (g_w - g_v), gamma' (g_w - g_v))`` and
into w exactly the negative, so ``sum_v y_v = sum_v z_v = 0`` at all times (both start at 0, and the
mixing keeps ``y + z`` per node). It is computed by that very function,
``edge_flow(g_v, g_w, c=gamma', step=s_e)``: gossip is the case ``g_u = x_u``, ``s_e = 1/2``.

Decentralized gradient descent (dgd, the primal baseline)
---------------------------------------------------------
The classical asynchronous gossip-gradient scheme (Ram, Nedic and Veeravalli 2010, with a
constant step): on activation of {v, w}, both ends average, ``m = (x_v + x_w) / 2``, then each
takes a gradient step on its own function at the average: ``x_v <- m - alpha grad f_v(m)``,
``x_w <- m - alpha grad f_w(m)``. With a constant step it converges linearly, but only to a
neighbourhood of x* whose size grows with alpha and with how different the ``f_v`` are; a
decreasing step removes the bias at a sublinear rate. It is what practitioners run first.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["dgd_average", "dgd_step"]

FloatArray = NDArray[np.float64]


def dgd_average(x_v: ArrayLike, x_w: ArrayLike) -> FloatArray:
    """Return the pairwise average ``(x_v + x_w) / 2`` that both ends of a DGD activation take."""
    return np.asarray(0.5 * (np.asarray(x_v, np.float64) + np.asarray(x_w, np.float64)))


def dgd_step(average: ArrayLike, grad: ArrayLike, alpha: ArrayLike) -> FloatArray:
    """Return ``average - alpha grad``: one end's local gradient step after the averaging.

    ``alpha`` broadcasts against ``average`` (one step per row, for a batch of runs).

    Examples
    --------
    >>> dgd_step([1.0], [2.0], alpha=0.25).tolist()
    [0.5]
    """
    step = np.asarray(alpha, np.float64)
    return np.asarray(np.asarray(average, np.float64) - step * np.asarray(grad, np.float64))
