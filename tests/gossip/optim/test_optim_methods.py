"""The three methods: the API, the exact discretisation, the deterministic bounds, bad input."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.mixing import mix, mix_convex
from continuized.gossip.optim import (
    DiagonalQuadratic,
    StochasticGradient,
    continuized_nesterov,
    gradient_descent,
    nesterov,
    nesterov_sequence,
    paper_convex,
    paper_strongly_convex,
)

Array = np.ndarray


def quadratic(seed: int = 3, d: int = 4) -> DiagonalQuadratic:
    rng = np.random.default_rng(seed)
    return DiagonalQuadratic(np.geomspace(0.02, 1.0, d), rng.standard_normal(d))


def test_issue_api() -> None:
    q = paper_strongly_convex()
    res = continuized_nesterov(q.grad, np.zeros(3), L=1.0, mu=1e-2, n_steps=2000, seed=0)
    assert res.x.shape == (3,)
    assert res.history["T"].shape == (2001,)
    assert res.history["x"].shape == (2001, 3)
    np.testing.assert_allclose(res.x, q.x_star, atol=1e-8)
    res = continuized_nesterov(q.grad, np.zeros(3), L=1.0, n_steps=2000, seed=0, f=q.f)
    assert res.history["f"].shape == (2001,)
    assert res.history["f"][-1] < 1e-4 * res.history["f"][0]
    T = res.history["T"]
    assert T[0] == 0.0
    assert np.all(np.diff(T) > 0)
    # T_k is a sum of k standard exponentials: about k, within a few sqrt(k).
    assert abs(T[-1] - 2000) < 5 * math.sqrt(2000)
    np.testing.assert_array_equal(res.history["x"][-1], res.x)


def test_seed_reproducible_and_batch_rows_independent() -> None:
    q = quadratic()
    a = continuized_nesterov(q.grad, np.zeros(4), L=1.0, n_steps=50, seed=7)
    b = continuized_nesterov(q.grad, np.zeros(4), L=1.0, n_steps=50, seed=7)
    np.testing.assert_array_equal(a.history["x"], b.history["x"])
    batch = continuized_nesterov(q.grad, np.zeros(4), L=1.0, n_steps=50, seed=7, runs=5)
    assert batch.history["T"].shape == (5, 51)
    assert batch.history["x"].shape == (5, 51, 4)
    assert len({float(t) for t in batch.history["T"][:, -1]}) == 5


def _event_simulation(
    grad: Callable[[Array], Array], x0: Array, T: Array, L: float, mu: float, splits: int
) -> tuple[Array, Array]:
    """The continuous process, event by event: exact mixing to each jump, then the jump.

    Each interval between jumps is crossed in ``splits`` random legs, reading the state at the
    intermediate times the way a node does, so the flow property is exercised too.
    """
    rng = np.random.default_rng(99)
    x, z = x0.copy(), x0.copy()
    xs, zs = [x.copy()], [z.copy()]
    s = math.sqrt(mu / L) if mu > 0 else 0.0
    for k in range(len(T) - 1):
        cuts = np.sort(rng.uniform(T[k], T[k + 1], splits - 1))
        legs = np.concatenate([[T[k]], cuts, [T[k + 1]]])
        for a, b in itertools.pairwise(legs):
            x, z = mix(x, z, s, b - a) if mu > 0 else mix_convex(x, z, a, b)
        g = grad(x)  # x is now x_{T_{k+1}-}
        gamma_prime = 1.0 / math.sqrt(mu * L) if mu > 0 else T[k + 1] / (2.0 * L)
        x, z = x - g / L, z - gamma_prime * g
        xs.append(x.copy())
        zs.append(z.copy())
    return np.array(xs), np.array(zs)


def _ode_simulation(
    grad: Callable[[Array], Array], x0: Array, T: Array, L: float, mu: float
) -> tuple[Array, Array]:
    """The continuous process with the mixing ODE solved numerically (no closed form at all)."""
    d = x0.size
    x, z = x0.copy(), x0.copy()
    xs, zs = [x.copy()], [z.copy()]
    for k in range(len(T) - 1):
        if mu > 0:
            s = math.sqrt(mu / L)

            def rhs(t: float, u: Array, s: float = s) -> Array:
                return np.concatenate([s * (u[d:] - u[:d]), s * (u[:d] - u[d:])])

        else:

            def rhs(t: float, u: Array) -> Array:
                return np.concatenate([2.0 / t * (u[d:] - u[:d]), np.zeros(d)])

        if mu == 0 and T[k] == 0:
            x = z.copy()  # the rate 2/t is infinite at t = 0: x is pulled onto z at once
        else:
            sol = solve_ivp(rhs, (T[k], T[k + 1]), np.concatenate([x, z]), rtol=1e-11, atol=1e-13)
            x, z = sol.y[:d, -1], sol.y[d:, -1]
        g = grad(x)
        gamma_prime = 1.0 / math.sqrt(mu * L) if mu > 0 else T[k + 1] / (2.0 * L)
        x, z = x - g / L, z - gamma_prime * g
        xs.append(x.copy())
        zs.append(z.copy())
    return np.array(xs), np.array(zs)


def _paper_recursion(
    grad: Callable[[Array], Array], x0: Array, T: Array, L: float, mu: float
) -> tuple[Array, Array]:
    """The paper's discrete recursion with its printed tau_k, tau'_k (and gamma'_k corrected)."""
    x, z = x0.copy(), x0.copy()
    xs, zs = [x.copy()], [z.copy()]
    for k in range(len(T) - 1):
        if mu > 0:
            s, dT = math.sqrt(mu / L), T[k + 1] - T[k]
            tau, tau_p, gamma_p = (
                (1 - math.exp(-2 * s * dT)) / 2,
                math.tanh(s * dT),
                1 / math.sqrt(mu * L),
            )
        else:
            tau, tau_p, gamma_p = 1 - (T[k] / T[k + 1]) ** 2, 0.0, T[k + 1] / (2 * L)
        y = x + tau * (z - x)
        g = grad(y)
        x, z = y - g / L, z + tau_p * (y - z) - gamma_p * g
        xs.append(x.copy())
        zs.append(z.copy())
    return np.array(xs), np.array(zs)


@pytest.mark.parametrize("mu", [0.0, 0.02])
def test_discrete_recursion_is_the_continuous_process(mu: float) -> None:
    q = quadratic()
    L = 1.0
    res = continuized_nesterov(q.grad, np.zeros(4), L=L, mu=mu, n_steps=40, seed=11)
    T = res.history["T"]
    for xs, zs, tol in (
        (*_event_simulation(q.grad, np.zeros(4), T, L, mu, splits=3), 1e-12),
        (*_paper_recursion(q.grad, np.zeros(4), T, L, mu), 1e-11),
        (*_ode_simulation(q.grad, np.zeros(4), T, L, mu), 1e-6),
    ):
        np.testing.assert_allclose(res.history["x"], xs, rtol=tol, atol=tol)
        np.testing.assert_allclose(res.history["z"], zs, rtol=tol, atol=tol)


def test_gradient_descent_and_nesterov_meet_their_bounds() -> None:
    # Theorem 1 of the paper, and the classical 1/k rate of gradient descent: deterministic.
    convex = paper_convex()
    x0 = np.zeros(100)
    r0 = float(np.sum((x0 - convex.x_star) ** 2))
    n = 500
    k = np.arange(1, n + 1)
    gd = gradient_descent(convex.grad, x0, convex.L, n, f=convex.f).history["f"][1:]
    nest = nesterov(convex.grad, x0, convex.L, n_steps=n, f=convex.f).history["f"][1:]
    assert np.all(gd <= convex.L * r0 / (2 * k))
    assert np.all(nest <= 2 * convex.L * r0 / k**2)
    assert nest[-1] < gd[-1] / 10  # acceleration shows

    strong = paper_strongly_convex()
    x0 = np.zeros(3)
    f0 = float(strong.f(x0))
    start = f0 + strong.mu / 2 * float(np.sum((x0 - strong.x_star) ** 2))
    k = np.arange(n + 1)
    q = math.sqrt(strong.mu / strong.L)
    nest = nesterov(strong.grad, x0, strong.L, strong.mu, n, f=strong.f).history["f"]
    gd = gradient_descent(strong.grad, x0, strong.L, n, f=strong.f).history["f"]
    assert np.all(nest <= start * (1 - q) ** k * (1 + 1e-9) + 1e-300)
    assert np.all(gd <= f0 * (1 - strong.mu / strong.L) ** k * (1 + 1e-9))


def test_nesterov_sequence() -> None:
    A = nesterov_sequence(200)
    assert A[0] == 0.0
    assert A[1] == 1.0
    # The defining identity of the sequence: (A_{k+1} - A_k)^2 = A_{k+1}.
    np.testing.assert_allclose(np.diff(A) ** 2, A[1:], rtol=1e-12)
    assert A[-1] >= 200**2 / 4


def test_stochastic_oracle_gets_the_run_generator() -> None:
    seen: list[np.random.Generator] = []

    def oracle(x: Array, rng: np.random.Generator) -> Array:
        seen.append(rng)
        return x + 0.01 * rng.standard_normal(x.shape)

    res = continuized_nesterov(StochasticGradient(oracle), [1.0], L=1.0, n_steps=3, seed=1)
    again = continuized_nesterov(StochasticGradient(oracle), [1.0], L=1.0, n_steps=3, seed=1)
    assert len(seen) == 6
    assert seen[0] is seen[2]
    np.testing.assert_array_equal(res.x, again.x)


def _identity(x: Array) -> Array:
    return x


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"L": 0.0}, "L (smoothness) must be a finite number > 0"),
        ({"L": -1.0}, "got -1.0"),
        ({"L": float("inf")}, "L (smoothness)"),
        ({"mu": 2.0}, "mu must be <= L"),
        ({"mu": -0.1}, "mu (strong convexity) must be a finite number >= 0"),
        ({"n_steps": -1}, "n_steps must be an integer >= 0, got -1"),
        ({"n_steps": 2.5}, "n_steps must be an integer"),
        ({"x0": np.zeros((2, 2))}, "x0 must be a non-empty 1-D array"),
        ({"x0": [np.nan, 0.0]}, "x0 must be finite"),
        ({"z0": np.zeros(3)}, "z0 has shape (3,) but x0 has shape (2,)"),
        ({"kappa_tilde": 0.5}, "kappa_tilde must be a finite number >= 1"),
        ({"runs": 0}, "runs must be an integer >= 1"),
        ({"seed": -3}, "seed must be None"),
        ({"grad_f": lambda x: x[:1]}, "grad_f returned an array of shape (1,) at step 0"),
        ({"grad_f": lambda x: x * np.inf}, "grad_f returned non-finite values at step 0"),
        ({"f": lambda x: np.ones(3)}, "f must return one finite value per run"),
        ({"grad_f": "not callable"}, "grad_f must be a callable"),
    ],
)
def test_bad_input_raises_config_error(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "grad_f": _identity,
        "x0": np.ones(2),
        "L": 1.0,
        "n_steps": 3,
        "seed": 0,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        continuized_nesterov(**args)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_bad_input_baselines() -> None:
    with pytest.raises(ConfigError, match="mu must be <= L"):
        nesterov(_identity, np.ones(2), L=1.0, n_steps=3, mu=3.0)
    with pytest.raises(ConfigError, match="L \\(smoothness\\)"):
        gradient_descent(_identity, np.ones(2), L=0.0, n_steps=3)
    with pytest.raises(ConfigError, match="non-finite"), np.errstate(over="ignore"):
        # A step 1/L far too long for f: the iterates blow up, reported as such.
        gradient_descent(lambda x: 1e300 * x, np.ones(2), L=1.0, n_steps=5)
