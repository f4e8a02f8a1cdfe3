"""The jumps of randomized gossip (RG) and accelerated randomized gossip (ARG).

On activation of edge {v, w} at time T, with values just before T::

    x_v, x_w <- (x_v + x_w) / 2
    z_v += c (x_w - x_v),   z_w += c (x_v - x_w)

RG is the special case ``c = 0`` with no mixing (``eta = 0``), where ``z`` plays no role.

In general (dual accelerated coordinate descent, the paper's Section 7) the ends exchange values
``u = g(x)`` of their first variable and the step is per edge::

    x_v += s_e (u_w - u_v),   x_w -= s_e (u_w - u_v),   z_v += c (u_w - u_v),   z_w -= ...

ARG is ``g = identity`` and ``s_e = 1/2``.

A jump is an additive *flow* across the edge: ``(dx, dz)`` into v and exactly ``(-dx, -dz)``
into w. Writing it as a flow, rather than as an assignment, is what makes asynchronous exchanges
exact:

* mass is conserved by construction (the two ends receive opposite flows);
* the mixing flow is linear, so a flow computed at time T and applied at a later time t is
  applied as ``mix(dx, dz, eta, t - T)`` (:func:`late_flow`), which gives exactly the state an
  on-time application followed by mixing would have given;
* a flow can be undone by applying its negative, and a per-edge sum of flows (a ledger) rebuilds
  a node's state from its initial value.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.model.mixing import Values, mix

__all__ = ["Flow", "apply_flow", "edge_flow", "edge_flow_values", "jump", "late_flow"]

FloatArray = NDArray[np.float64]


class Flow(NamedTuple):
    """What flows into the first end of an edge at a jump; the other end receives the negative."""

    dx: FloatArray
    dz: FloatArray


def edge_flow(x_v: ArrayLike, x_w: ArrayLike, c: float, step: ArrayLike = 0.5) -> Flow:
    """Return the flow into v when edge {v, w} is activated (w receives ``-flow``).

    Parameters
    ----------
    x_v, x_w : array_like
        The exchanged values of the two ends just before the jump, at the same time T: ``x``
        for gossip, ``u = g(y)`` in general.
    c : float
        Coupling ``1 / sqrt(2 mu R_max)`` for ARG, ``0`` for RG.
    step : float or array_like
        The edge's step ``s_e`` (``1/2`` for gossip: the two ends meet at their average;
        ``gamma R_eff(e)`` for dual coordinate descent, :mod:`gossip.dual`). An array
        broadcasts against the values: one step per row of a batch of runs.

    Returns
    -------
    Flow
        ``dx = step (x_w - x_v)`` and ``dz = c (x_w - x_v)``.

    Examples
    --------
    >>> f = edge_flow(1.0, 0.0, c=2.0)
    >>> float(f.dx), float(f.dz)
    (-0.5, -2.0)
    """
    gap = np.asarray(x_w, dtype=np.float64) - np.asarray(x_v, dtype=np.float64)
    return Flow(np.asarray(step, dtype=np.float64) * gap, c * gap)


def edge_flow_values(
    x_v: Values, x_w: Values, c: float, step: float = 0.5
) -> tuple[Values, Values]:
    """Return :func:`edge_flow` of one edge as lists of floats ``(dx, dz)`` into v.

    ``dx = step (x_w - x_v)`` and ``dz = c (x_w - x_v)``, component by component: the live
    nodes' fast path, the same arithmetic as :func:`edge_flow` without numpy.

    Examples
    --------
    >>> edge_flow_values([1.0], [0.0], c=2.0)
    ([-0.5], [-2.0])
    """
    if isinstance(x_v, np.ndarray) or isinstance(x_w, np.ndarray):  # a model's parameters
        gap = np.asarray(x_w, dtype=np.float64) - np.asarray(x_v, dtype=np.float64)
        return step * gap, c * gap
    gaps = [w - v for v, w in zip(x_v, x_w, strict=True)]
    return [step * g for g in gaps], [c * g for g in gaps]


def apply_flow(
    x: ArrayLike, z: ArrayLike, flow: Flow, sign: float = 1.0
) -> tuple[FloatArray, FloatArray]:
    """Return ``(x + sign dx, z + sign dz)``: one end's side of a jump (``sign=-1`` for w)."""
    return (
        np.asarray(x, dtype=np.float64) + sign * flow.dx,
        np.asarray(z, dtype=np.float64) + sign * flow.dz,
    )


def jump(
    x_v: ArrayLike, z_v: ArrayLike, x_w: ArrayLike, z_w: ArrayLike, c: float
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Apply the jump of edge {v, w} to both ends, all values taken at the same time T.

    Returns
    -------
    (x_v, z_v, x_w, z_w)
        The values just after the jump.

    Examples
    --------
    >>> [float(a) for a in jump(1.0, 1.0, 0.0, 0.0, c=0.5)]  # complete-graph ARG equals RG
    [0.5, 0.5, 0.5, 0.5]
    """
    flow = edge_flow(x_v, x_w, c)
    new_x_v, new_z_v = apply_flow(x_v, z_v, flow, 1.0)
    new_x_w, new_z_w = apply_flow(x_w, z_w, flow, -1.0)
    return new_x_v, new_z_v, new_x_w, new_z_w


def late_flow(flow: Flow, eta: float, delay: ArrayLike) -> Flow:
    """Return a flow computed at time T as it must be added at time ``T + delay``.

    By linearity of the mixing, adding ``mix(dx, dz, eta, delay)`` at ``T + delay`` gives the same
    state as adding ``(dx, dz)`` at T and then mixing over ``delay``. ``delay`` may be negative,
    to move a flow back in time (for instance to undo it at its own time).
    """
    dx, dz = mix(flow.dx, flow.dz, eta, delay)
    return Flow(dx, dz)
