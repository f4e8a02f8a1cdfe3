"""``logistic:LAMBDA``: ``f_v(x) = 1/m_v sum_i log(1 + exp(-s_i a_i^T x)) + LAMBDA/2 |x|^2``.

Labels ``s_i`` are in ``{-1, +1}``: targets already in ``{-1, +1}`` are kept, ``{0, 1}`` maps
``0 -> -1``, and any other (continuous) target is cut at zero, ``s = +1`` iff ``b > 0`` (so
a regression data set such as the DADAO setting can be used as a classification task).

Constants: ``mu = LAMBDA`` (``> 0``; without it ``f`` is not strongly convex) and
``L = lambda_max(A^T A) / (4 m) + LAMBDA`` (the logistic loss has curvature <= 1/4).

``grad f^*(y)`` has no closed form: it is the root of ``grad f(x) = y``, found by safeguarded
Newton (full steps while they reduce the residual, an Armijo line search otherwise), started
from a guess (``x0``, or the node's previous answer), and stopped once
``|grad f(x) - y| <= tol`` (default ``tol = 1e-10``). Since ``f`` is ``mu``-strongly convex this
bounds the error by ``|x - grad f^*(y)| <= tol / mu``. Measured
(tests/gossip/problems/test_problems_math.py::test_newton_error_within_stated_bound:
breast-cancer, ``label:0`` split over 4 nodes, ``LAMBDA = 0.01``, 64 random ``y``, against a
``1e-14`` solve): largest error 1.7e-9 at ``tol = 1e-10`` (bound 1e-8), 3.9e-5 at ``1e-6``
(bound 1e-4), 5.0e-2 at ``1e-3`` (bound 0.1).

Cost: one Newton step on ``k`` rows is ``O(k M d^2)`` (``M`` the longest shard); from a good
guess (``x0``, the row's previous answer) 2-3 steps reach ``tol``, from zero 10-20.

One node (:class:`Logistic`, the live hot path) solves on its own shard with 2-d arrays, starts
from the first-order correction ``x0 + hess^-1 (y - y0)`` (the Cholesky factor of the previous
call's last Hessian is kept) and returns after a full step whose remainder is certified below
``tol / 2`` without evaluating it (:class:`_LocalNewton`): the same guarantee, ``|grad f(x) -
y| <= tol`` on every answer. Measured (``python benchmarks/bench_live_optimize.py
--solver-only``: node 5 of grid:4x4, breast-cancer ``label:1``, ``LAMBDA = 0.01``, the ``y`` of
a simulated run replayed): 0.7 Newton steps per call, 5.5 times less CPU than the batched
solver from the previous answer (40-80 us against 220-440 us, with the machine's load); the
largest error against a ``1e-14`` solve 2.8e-9 (bound ``tol / mu`` = 1e-8).

Where numba imports, that path runs compiled, one call per answer
(:mod:`gossip.problems.newton_kernel`, loaded by :mod:`gossip.problems.compiled_newton`;
``GOSSIP_SOLVER=numpy`` turns it off): replayed, 22 us per call against 46 us on line:30's
node 5 (``iid:0``); in a live cluster (line:30, 1500/s), where 30 processes on two cores leave
every call's caches cold, 35 us against 97 us.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import lapack
from scipy.special import expit

from continuized.gossip.datasets.shard import Shard
from continuized.gossip.errors import ConfigError, LocalError
from continuized.gossip.problems.arrays import NewtonConjugate
from continuized.gossip.problems.base import FloatArray, ProblemSet
from continuized.gossip.problems.compiled_newton import CompiledNewton, compiled_solver

__all__ = ["DEFAULT_TOL", "Logistic", "LogisticSet", "labels", "newton_conjugate"]

DEFAULT_TOL = 1e-10
_MAX_NEWTON = 100
_MAX_HALVINGS = 40
# sup |d^3/dt^3 log(1 + e^-t)| = sup |sigma(t) sigma(-t) (1 - 2 sigma(t))| = 1 / (6 sqrt 3).
_PHI3 = 1.0 / (6.0 * np.sqrt(3.0))
# LAPACK's Cholesky solve, without scipy.linalg's checks: 5 us on 30 x 30 against 20 us.
_POSV = lapack.get_lapack_funcs("posv", dtype=np.float64)
_POTRS = lapack.get_lapack_funcs("potrs", dtype=np.float64)


def labels(b: FloatArray) -> FloatArray:
    """Targets as ``{-1, +1}`` labels (see the module docstring for the rule)."""
    kinds = set(np.unique(b).tolist())
    if kinds <= {-1.0, 1.0}:
        return np.asarray(b, dtype=np.float64).copy()
    return np.where(b > (0.5 if kinds <= {0.0, 1.0} else 0.0), 1.0, -1.0)


def _check_lambda(lam: float) -> float:
    if not (np.isfinite(lam) and lam > 0):
        raise ConfigError(
            f"logistic: LAMBDA must be a finite number > 0 (f must be strongly convex), got {lam}"
        )
    return float(lam)


def _objective(
    A: FloatArray, s: FloatArray, w: FloatArray, lam: float, y: FloatArray, x: FloatArray
) -> FloatArray:
    """Per row k: ``sum_i w_i log(1 + exp(-s_i a_i^T x_k)) + lam/2 |x_k|^2 - <x_k, y_k>``."""
    t = s * np.einsum("kmd,kd->km", A, x)
    loss = (w * np.logaddexp(0.0, -t)).sum(axis=1)
    return np.asarray(loss + 0.5 * lam * (x * x).sum(axis=1) - (x * y).sum(axis=1))


def _residual(
    A: FloatArray, s: FloatArray, w: FloatArray, lam: float, y: FloatArray, x: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Margins ``t = s A x``, the gradient ``grad f(x) - y`` and its norm, per row."""
    t = s * np.einsum("kmd,kd->km", A, x)
    g = lam * x - y - np.einsum("kmd,km->kd", A, w * s * expit(-t))
    return t, g, np.sqrt((g * g).sum(axis=1))


def _armijo(
    A: FloatArray,
    s: FloatArray,
    w: FloatArray,
    lam: float,
    y: FloatArray,
    x: FloatArray,
    g: FloatArray,
    step: FloatArray,
) -> FloatArray:
    """``x - alpha step`` per row, ``alpha`` halved from 1 until the objective drops enough."""
    x = x.copy()
    phi = _objective(A, s, w, lam, y, x)
    slope = (g * step).sum(axis=1)
    alpha = np.ones(len(x))
    todo = np.ones(len(x), dtype=bool)
    for _ in range(_MAX_HALVINGS):
        cand = x[todo] - alpha[todo, None] * step[todo]
        new = _objective(A[todo], s[todo], w[todo], lam, y[todo], cand)
        # Armijo, with slack for rounding: near the root phi changes below machine precision.
        bound = phi[todo] - 1e-4 * alpha[todo] * slope[todo] + 1e-15 * (1.0 + np.abs(phi[todo]))
        ok = new <= bound
        idx = np.flatnonzero(todo)
        x[idx[ok]] = cand[ok]
        todo[idx[ok]] = False
        if not todo.any():
            break
        alpha[todo] *= 0.5
    return x


def newton_conjugate(
    A: FloatArray,
    s: FloatArray,
    w: FloatArray,
    lam: float,
    y: FloatArray,
    x0: FloatArray,
    tol: float = DEFAULT_TOL,
) -> FloatArray:
    """Solve ``grad f_k(x_k) = y_k`` for ``k`` stacked problems at once (safeguarded Newton).

    ``A`` (k, M, d), ``s`` and ``w`` (k, M): rows, labels and weights (``1/m``, or 0 for the
    padding of shorter shards); ``y`` and ``x0`` (k, d). A row leaves the batch once its
    gradient residual is ``<= tol``. Each row first takes full Newton steps without evaluating
    the objective (from a warm start they converge quadratically); a row whose full step did
    not reduce its residual is put back and line-searches (Armijo) from then on.
    """
    x = np.array(x0, dtype=np.float64, copy=True)
    eye = lam * np.eye(x.shape[1])
    rows = np.arange(len(x))
    xa = x.copy()
    careful = np.zeros(len(x), dtype=bool)
    unchecked = np.zeros(len(x), dtype=bool)
    prev_x, prev_res = xa.copy(), np.full(len(x), np.inf)
    for _ in range(_MAX_NEWTON):
        t, g, res = _residual(A, s, w, lam, y, xa)
        bad = unchecked & (res >= prev_res)
        if bad.any():
            xa[bad] = prev_x[bad]
            careful |= bad
            t[bad], g[bad], res[bad] = _residual(A[bad], s[bad], w[bad], lam, y[bad], xa[bad])
        done = res <= tol
        if done.any():
            x[rows[done]] = xa[done]
            keep = ~done
            if not keep.any():
                return x
            rows, A, s, w, y, xa = rows[keep], A[keep], s[keep], w[keep], y[keep], xa[keep]
            t, g, res, careful = t[keep], g[keep], res[keep], careful[keep]
        h = w * expit(t) * expit(-t)
        # (A^T diag(h) A) per row as one batched matmul: einsum with 3 operands is far slower.
        hess = np.matmul(A.transpose(0, 2, 1) * h[:, None, :], A) + eye
        step = np.linalg.solve(hess, g[..., None])[..., 0]
        prev_x, prev_res = xa.copy(), res
        unchecked = ~careful
        xa[unchecked] -= step[unchecked]
        if careful.any():
            c = careful
            xa[c] = _armijo(A[c], s[c], w[c], lam, y[c], xa[c], g[c], step[c])
    raise LocalError(
        f"logistic: Newton did not reach |grad f(x) - y| <= {tol:g} in {_MAX_NEWTON} steps; "
        "use a larger tol or LAMBDA"
    )


class _LocalNewton:
    """One shard's ``grad f^*`` by Newton on 2-d arrays, warm-started: the live node's hot path.

    The batched :func:`newton_conjugate` pays numpy's per-call overhead on 3-d arrays and one
    residual evaluation only to see that it is below ``tol``. Here:

    * the first step is the first-order correction ``x0 + C^-1 (y - y0)``, with ``C`` the
      Cholesky factor kept from the previous call (the Hessian near its answer ``x0``, for
      ``y0``): the derivative of ``grad f^*`` at ``y0`` is that Hessian's inverse. No Hessian,
      one triangular solve, and it saves about one Newton step (measured:
      ``benchmarks/bench_problems.py``);
    * then full Newton steps (a fresh Hessian and its LAPACK Cholesky, margins kept by
      difference). After a full step ``p`` from ``x`` the new residual is at most

          |grad f(x - p) - y| <= PHI3 / (2 m) sum_i |a_i| (a_i^T p)^2

      (``PHI3 = sup |phi^(3)|`` of the logistic loss, integrated along the step), which costs
      the product ``A p`` that the next margins need anyway: once it is ``<= tol / 2`` (half:
      room for the rounding of the solve) ``x - p`` is returned without evaluating it.

    (Reusing ``C`` for later steps too, a chord method, was measured slower: with ``mu = 0.01``
    the Hessian changes too much relative to ``mu`` for it to contract fast.)

    Every answer has ``|grad f(x) - y| <= tol``, so ``|x - grad f^*(y)| <= tol / mu`` as for
    the batched solver. A Newton step that does not shrink the residual hands the problem back
    to :func:`newton_conjugate` (line search): this method then returns None.
    """

    def __init__(self, A: FloatArray, s: FloatArray, lam: float, tol: float) -> None:
        self.As = np.ascontiguousarray(A * s[:, None])  # row i: s_i a_i
        self.AsT = np.ascontiguousarray(self.As.T)
        self.norms = np.sqrt((A * A).sum(axis=1)) * (_PHI3 / (2 * len(A)))
        self.lam, self.tol, self.inv_m = lam, tol, 1.0 / len(A)
        self.eye = lam * np.eye(A.shape[1])
        self._chol: FloatArray | None = None  # Cholesky factor of the last Hessian
        self._y: FloatArray | None = None  # the y of the last answer
        self.newton_steps = 0  # counted for the benchmark

    def forget(self) -> None:
        """Drop the kept factor: the next answer starts from the last one, uncorrected."""
        self._chol = None

    def solve(self, y: FloatArray, x0: FloatArray) -> FloatArray | None:
        """``grad f^*(y)`` from ``x0`` (the last answer), or None if Newton stalled."""
        As, AsT, lam, tol, chol = self.As, self.AsT, self.lam, self.tol, self._chol
        x = x0.copy()
        prev = np.inf
        if chol is not None and self._y is not None:
            dy = y - self._y
            x += _POTRS(chol, dy)[0]
            # The residual before the correction was about |dy|: it must go below that.
            prev = float(np.sqrt(dy @ dy)) + tol
        t = As @ x
        self._chol = self._y = None  # kept only with a successful answer
        for _ in range(_MAX_NEWTON):
            sig = expit(-t)  # sigma(-t_i) = -phi'(t_i)
            g = lam * x - y - (AsT @ sig) * self.inv_m
            res = float(np.sqrt(g @ g))
            if res <= tol:
                break
            if not res < prev:  # also catches nan
                return None
            prev = res
            h = sig * (1.0 - sig) * self.inv_m
            chol, p, info = _POSV(np.dot(AsT * h, As) + self.eye, g)
            if info != 0:
                return None
            self.newton_steps += 1
            q = As @ p
            x -= p
            if float(self.norms @ (q * q)) <= 0.5 * tol:
                break
            t -= q
        else:
            return None
        self._chol, self._y = chol, y.copy()
        return x


class Logistic:
    """One node's L2-regularised logistic regression, built from its own shard only.

    Its :meth:`grad_conjugate` is compiled (:mod:`.newton_kernel`) where numba imports, and
    runs on numpy otherwise (``GOSSIP_SOLVER=numpy``): the same steps, the same guarantee.
    """

    def __init__(self, shard: Shard, lam: float, tol: float = DEFAULT_TOL) -> None:
        self.shard, self.lam, self.tol = shard, _check_lambda(lam), float(tol)
        self.s = labels(shard.b)
        self._L = float(np.linalg.eigvalsh(shard.A.T @ shard.A)[-1]) / (4 * shard.m) + self.lam
        self._w = np.full((1, shard.m), 1.0 / shard.m)
        self._warm = np.zeros((1, shard.dim))
        self._solver: _LocalNewton | CompiledNewton | None = None

    @property
    def _fast(self) -> _LocalNewton | CompiledNewton:
        """This shard's own solver, built on first use: a problem set's problems (the
        simulator's, the coordinator's) never use it, and the compiled one loads numba."""
        if self._solver is None:
            kernel = compiled_solver()
            self._solver = (
                _LocalNewton(self.shard.A, self.s, self.lam, self.tol)
                if kernel is None
                else CompiledNewton(
                    kernel, self.shard.A, self.s, self.lam, self.tol, _PHI3, _MAX_NEWTON
                )
            )
        return self._solver

    @_fast.setter
    def _fast(self, solver: _LocalNewton | CompiledNewton) -> None:
        self._solver = solver

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return self.shard.dim

    @property
    def mu(self) -> float:
        """``LAMBDA``."""
        return self.lam

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """``lambda_max(A^T A) / (4 m) + LAMBDA``."""
        return self._L

    def value(self, x: FloatArray) -> float:
        """``f(x)``."""
        t = self.s * (self.shard.A @ x)
        return float(np.logaddexp(0.0, -t).mean()) + 0.5 * self.lam * float(x @ x)

    def grad(self, x: FloatArray) -> FloatArray:
        """``-1/m A^T (s sigma(-s A x)) + LAMBDA x``."""
        t = self.s * (self.shard.A @ x)
        return np.asarray(
            self.lam * x - self.shard.A.T @ (self.s * expit(-t)) / self.shard.m, dtype=np.float64
        )

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        """``argmin_x f(x) - <x, y>`` by Newton, warm-started from the previous answer.

        Plain Newton on this shard first (:class:`_LocalNewton`, the live hot path); the
        safeguarded batched solver if one of its steps fails to shrink the residual.
        """
        rows = np.ascontiguousarray(y, dtype=np.float64)
        if rows.shape != (self.dim,):  # the compiled kernel does not check its bounds
            raise ConfigError(f"y must have shape ({self.dim},), got {rows.shape}")
        fast = self._fast.solve(rows, self._warm[0])
        if fast is not None:
            self._warm[0] = fast  # a copy: the caller owns the answer
            return fast
        x = newton_conjugate(
            self.shard.A[None],
            self.s[None],
            self._w,
            self.lam,
            rows[None],
            self._warm,
            self.tol,
        )
        self._warm = x
        return np.array(x[0], dtype=np.float64)


class LogisticSet(ProblemSet):
    """``n`` logistic problems with their rows stacked (padded to the longest shard)."""

    def __init__(self, shards: Sequence[Shard], lam: float, tol: float = DEFAULT_TOL) -> None:
        self._local = [Logistic(s, lam, tol) for s in shards]
        self.lam, self.tol = _check_lambda(lam), float(tol)
        n, d, rows = len(shards), shards[0].dim, max(s.m for s in shards)
        self._A = np.zeros((n, rows, d))
        self._s = np.ones((n, rows))
        self._w = np.zeros((n, rows))  # padding rows weigh 0
        for v, (shard, p) in enumerate(zip(shards, self._local, strict=True)):
            self._A[v, : shard.m], self._s[v, : shard.m] = shard.A, p.s
            self._w[v, : shard.m] = 1.0 / shard.m
        # Every row of every node once, for F and x*.
        keep = self._w > 0
        self._Acat, self._scat, self._wcat = self._A[keep], self._s[keep], self._w[keep]
        # Warm starts live here, not in a global: one answer per node, the latest.
        self._warm = np.zeros((n, d))

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self._local)

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return int(self._A.shape[2])

    @property
    def mu(self) -> float:
        """``LAMBDA``."""
        return self.lam

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Maximum over nodes of ``L_v``."""
        return max(p.L for p in self._local)

    def local(self, v: int) -> Logistic:
        """Node ``v``'s problem."""
        return self._local[v]

    def grad_conjugate(
        self, nodes: NDArray[np.intp], y: FloatArray, x0: FloatArray | None = None
    ) -> FloatArray:
        """Row ``i``: ``grad f_v^*(y[i])``, one batched Newton solve over the rows.

        Newton starts from ``x0`` (k, d) if given (e.g. the caller's previous answer for the
        same row: the best guess), else from each node's latest answer kept here.
        """
        ids, rows = self._batch(nodes, y)
        start = self._warm[ids] if x0 is None else np.asarray(x0, dtype=np.float64)
        if start.shape != rows.shape:
            raise ConfigError(f"x0 must have the shape of y, {rows.shape}, got {start.shape}")
        x = newton_conjugate(
            self._A[ids], self._s[ids], self._w[ids], self.lam, rows, start, self.tol
        )
        self._warm[ids] = x
        return x

    def conjugate_arrays(self) -> NewtonConjugate:
        """Every node's rows for the compiled Newton (the live node's), padded with zero rows."""
        m = np.array([p.shard.m for p in self._local], dtype=np.float64)
        A = self._A
        norms = np.sqrt((A * A).sum(axis=2)) * (_PHI3 / (2.0 * m))[:, None]
        return NewtonConjugate(
            As=np.ascontiguousarray(A * self._s[:, :, None]),
            norms=np.ascontiguousarray(norms),
            inv_m=1.0 / m,
            lam=self.lam,
            tol=self.tol,
            max_steps=_MAX_NEWTON,
            max_halvings=_MAX_HALVINGS,
        )

    def gradient_arrays(self) -> NewtonConjugate:
        """The same rows as :meth:`conjugate_arrays`: they give ``grad f_v`` too."""
        return self.conjugate_arrays()

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        """Row ``i``: ``grad f_v(x[i])``."""
        ids, rows = self._batch(nodes, x)
        A, s = self._A[ids], self._s[ids]
        t = s * np.einsum("kmd,kd->km", A, rows)
        out = self.lam * rows - np.einsum("kmd,km->kd", A, self._w[ids] * s * expit(-t))
        return np.asarray(out, dtype=np.float64)

    def values(self, x: FloatArray) -> FloatArray:
        """``F`` per row, over the stacked rows of every node."""
        rows = self._rows(x)
        t = self._scat * (rows @ self._Acat.T)
        loss = np.logaddexp(0.0, -t) @ self._wcat
        return np.asarray(loss + 0.5 * self.n * self.lam * (rows * rows).sum(axis=1))

    def value(self, x: FloatArray) -> float:
        """``F(x)``."""
        return float(self.values(self._point(x)[None, :])[0])

    def x_star(self) -> FloatArray:
        """Newton on ``F`` itself (the same solver: ``F`` is one logistic problem, ``n LAMBDA``)."""
        x = newton_conjugate(
            self._Acat[None],
            self._scat[None],
            self._wcat[None],
            self.n * self.lam,
            np.zeros((1, self.dim)),
            np.zeros((1, self.dim)),
            1e-13 * self.n,
        )
        return np.array(x[0], dtype=np.float64)
