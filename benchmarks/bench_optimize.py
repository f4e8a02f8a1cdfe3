"""Benchmark: how much sooner accelerated dual gossip (acd) reaches 1e-8 than plain dual CD (cd).

Run with ``python benchmarks/bench_optimize.py [--runs 8] [--cd-horizon auto|T] [--cd-cap
1e6] [--acd-horizon 100000] [--problems ridge:1,logistic:1]`` (ridge, 4 runs: 4 minutes).
For ridge and logistic regression (lambda = 1) on breast-cancer (iid split) over line:30 and
grid:10x10, acd and cd run on the same activations (same seed); the figure is the ratio of
their times to a median ``sum_v |x_v - x*|^2 <= 1e-8``, printed next to the theory's factor
``theta_acd / theta_cd``. Both are ratios measured in one run, so they mean the same on any
machine; the wall times printed are for this machine.

cd is slow to reach 1e-8 (``--cd-horizon auto``, the default, simulates it to 1.2 times the
time its asymptotic rate needs, at most ``--cd-cap``). If it still has not, its time is
reported three ways: the measured lower bound (``ratio >= horizon / t_acd``), the log-linear
fit of its median over the later half of the horizon, and the continuation from its last
point at its exact asymptotic rate (below). Measured rates (``fit``) are the slopes of the
log median over the later half of the part of the curve above ``1e-10``.

Which factor to expect. ``theory`` is the ratio of the two *guaranteed* rates,
``theta_acd / theta_cd = sqrt(2 kappa R_max / mu_gossip) / R_min`` (SPEC section 6,
:mod:`gossip.dual.params`): worst-case bounds, with ``kappa = max_v L_v / min_v mu_v``. cd's
bound is loose: the rate it really has near ``x*`` is computed here exactly. Near ``x*`` cd is
linear in ``y`` (exactly so for ridge), ``E[y - y*]`` follows ``d/dt e = -(L_s (x) I) B e``
with ``L_s = sum_e P_e s_e (e_v - e_w)(e_v - e_w)^T`` and ``B = diag_v (hess f_v(x*))^-1``,
so ``E sum_v |x_v - x*|^2 >= |E[x] - x*|^2`` decays at most at rate ``2 lambda``, ``lambda`` the
smallest non-zero eigenvalue of ``B^1/2 (L_s (x) I) B^1/2`` (``cd asym``; Jensen makes it an
upper bound of cd's real rate, tight when the steps are small against the curvature: for plain
averaging on a line it is ``mu_gossip``, twice randomized gossip's exact ``mu_gossip / 2``).
So cd's time continued at that rate is a lower bound, and ``asym factor``, acd's measured rate
over ``cd asym``, is a lower bound of the acceleration this problem and graph allow: when it
is far below ``theory``, cd beats its worst-case bound and the theory's factor cannot show.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
from scipy.linalg import eigh

from continuized.gossip.dual.experiment import algorithm_params
from continuized.gossip.dual.network import build_network
from continuized.gossip.dual.params import DualParams
from continuized.gossip.dual.result import OptimizationResult, t_eps
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology

EPS = 1e-8
CASES = [
    (problem, graph) for problem in ("ridge:1", "logistic:1") for graph in ("line:30", "grid:10x10")
]


def _tail_fit(result: OptimizationResult, floor: float = EPS * 1e-2) -> tuple[float, float]:
    """Slope and intercept of ``log median`` against t over the later half (in t) of the grid
    points where the median is still above ``floor`` (below, acd soon reaches rounding)."""
    median = result.median()
    above = np.flatnonzero(median > floor)
    keep = above[above >= above[-1] // 2] if above.size else above
    if keep.size < 3:
        return math.nan, math.nan
    slope, intercept = np.polyfit(result.t_grid[keep], np.log(median[keep]), 1)
    return float(slope), float(intercept)


def _extrapolate(result: OptimizationResult, eps: float) -> float | None:
    """Time at which the fitted log-linear decay of the median (:func:`_tail_fit`) reaches eps."""
    slope, intercept = _tail_fit(result)
    if not slope < 0:
        return None
    return float((math.log(eps) - intercept) / slope)


def _hessians(problems: Any, x: Any, h: float = 1e-5) -> Any:
    """``hess f_v(x)`` for every node, by central differences of the batched gradients."""
    n, d = problems.n, problems.dim
    nodes = np.repeat(np.arange(n, dtype=np.intp), d)
    shift = np.tile(np.eye(d) * h, (n, 1))
    base = np.tile(x, (n * d, 1))
    cols = (problems.grad(nodes, base + shift) - problems.grad(nodes, base - shift)) / (2 * h)
    hess = cols.reshape(n, d, d).transpose(0, 2, 1)
    return 0.5 * (hess + hess.transpose(0, 2, 1))


def cd_asymptotic_rate(topo: Topology, problems: Any, params: DualParams, x_star: Any) -> float:
    """``2 lambda``: the rate of ``|E[x] - x*|^2`` for cd near ``x*`` (module docstring)."""
    n, d = problems.n, problems.dim
    lap = np.zeros((n, n))
    for (v, w), p, s in zip(topo.edges, topo.probs, params.steps, strict=True):
        lap[v, v] += p * s
        lap[w, w] += p * s
        lap[v, w] -= p * s
        lap[w, v] -= p * s
    root = np.zeros((n * d, n * d))  # B^1/2, block diagonal
    for v, hess in enumerate(_hessians(problems, x_star)):
        vals, vecs = np.linalg.eigh(hess)
        root[v * d : (v + 1) * d, v * d : (v + 1) * d] = (vecs / np.sqrt(vals)) @ vecs.T
    op = root @ np.kron(lap, np.eye(d)) @ root
    # The kernel is d-dimensional (B^-1/2 (1 (x) u)); the next eigenvalue is the rate.
    vals = eigh(op, eigvals_only=True, subset_by_index=[0, d])
    return float(2.0 * vals[d])


def _simulate(case: tuple[Any, Any, Any, Any], params: DualParams, end: float, args: Any) -> Any:
    topo, problems, star, _ = case
    grid = np.linspace(0, end, 200)
    return simulate_optimization(topo, problems, params, grid, args.runs, args.seed, x_star=star)


def _rates(result: OptimizationResult) -> float:
    slope = _tail_fit(result)[0]
    return -slope if math.isfinite(slope) else math.nan


def main() -> None:
    """Print, per case, acd's and cd's times to 1e-8, their ratio, the rates and the factors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--cd-horizon", default="auto", help="a time, or auto (see above)")
    parser.add_argument("--cd-cap", type=float, default=1e6, help="longest auto horizon")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--acd-horizon", type=float, default=100_000.0)
    parser.add_argument("--problems", default="ridge:1,logistic:1")
    args = parser.parse_args()
    print(
        f"{'case':<22} {'t_acd':>8} {'t_cd':>9} {'cd fit':>8} {'cd asym':>8} "
        f"{'ratio':>7} {'fit':>6} {'asym':>6} | {'acd fit':>8} {'th_acd':>8} {'cd fit':>8} "
        f"{'cd asym':>8} {'th_cd':>8} | {'asym factor':>11} {'theory':>7} {'wall s':>6}"
    )
    for problem, graph in CASES:
        if problem not in args.problems.split(","):
            continue
        started = time.perf_counter()
        topo = parse_topology(graph)
        q = graph_quantities(topo)
        problems = build_network(problem, "breast-cancer", f"iid:{args.seed}", topo.n).problems
        star = problems.x_star()
        case = (topo, problems, star, graph)
        acd_p = algorithm_params("acd", q, problems)
        cd_p = algorithm_params("cd", q, problems)
        cd_rate = cd_asymptotic_rate(topo, problems, cd_p, star)
        acd = _simulate(case, acd_p, min(40.0 / acd_p.theta, args.acd_horizon), args)
        start_err = float(acd.median()[0])
        if args.cd_horizon == "auto":
            cd_end = min(1.2 * math.log(max(start_err, EPS) / EPS) / cd_rate, args.cd_cap)
        else:
            cd_end = float(args.cd_horizon)
        cd = _simulate(case, cd_p, cd_end, args)
        t_acd, t_cd = t_eps(acd, EPS), t_eps(cd, EPS)
        if t_acd is None:  # past the horizon too: extrapolated, and said so
            t_acd = _extrapolate(acd, EPS)
            print(f"  ({problem} {graph}: acd did not reach {EPS:g}; t_acd is extrapolated)")
        if t_cd is None:
            fit = _extrapolate(cd, EPS)
            last = float(cd.median()[-1])
            asym: float | None = cd_end + math.log(last / EPS) / cd_rate
            cd_text = f">{cd_end:.3g}"
        else:
            fit = asym = t_cd
            cd_text = f"{t_cd:.3g}"
        acd_rate = _rates(acd)

        def ratio(t: float | None, t_acd: float | None = t_acd) -> str:
            return "-" if t is None or t_acd is None else f"{t / t_acd:.3g}"

        bound = "" if t_cd is not None else ">="
        print(
            f"{problem + ' ' + graph:<22} {t_acd or math.nan:>8.3g} {cd_text:>9} "
            f"{fit or math.nan:>8.3g} {asym or math.nan:>8.3g} "
            f"{bound + ratio(t_cd if t_cd is not None else cd_end):>7} {ratio(fit):>6} "
            f"{ratio(asym):>6} | {acd_rate:>8.2e} {acd_p.theta:>8.2e} {_rates(cd):>8.2e} "
            f"{cd_rate:>8.2e} {cd_p.theta:>8.2e} | {acd_rate / cd_rate:>11.3g} "
            f"{acd_p.theta / cd_p.theta:>7.3g} {time.perf_counter() - started:>6.1f}"
        )
    print(
        "t_cd: measured (or >horizon); cd fit / cd asym: its time extrapolated by the fit of "
        "its later half / at its asymptotic rate from its last point. ratio, fit, asym: t_cd / "
        "t_acd for each.\nRates (1/t): acd fit, cd fit measured (slopes of the log median); "
        "th_acd, th_cd the guaranteed ones; cd asym = 2 lambda (exact, near x*).\n"
        "asym factor = acd fit / cd asym: the acceleration this problem allows; theory = "
        "th_acd / th_cd, a ratio of worst-case bounds that cd beats when cd asym > th_cd."
    )


if __name__ == "__main__":
    main()
