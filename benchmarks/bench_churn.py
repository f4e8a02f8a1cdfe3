"""Time to eps with churn (a leave, then a join) against an undisturbed run of the same graph.

Both runs are the exact sequential model (:func:`gossip.sim.churn.run_churn`: each node's ledger,
the same jump and mixing functions as the live nodes, views switched with the settlement rule),
with the same initial values and seeds, so the ratio only measures what the churn costs:

* undisturbed: ARG on the graph from t = 0;
* churn: the same, then node ``--leaver`` leaves at ``--t-leave`` and a new node (value
  ``--join-value``, attached to ``--attach`` random members) joins at ``--t-join``; each change
  publishes a new view (graph quantities and parameters recomputed) at its time.

The error is ``sum over members of 1/2 (x_v - mean)^2`` to the *current* members' mean,
relative to the undisturbed run's initial error; ``t_eps`` is the first grid time at which it
is ``<= --eps``. The script prints, per run and as medians, both ``t_eps`` (units of t), the
ratio churn / undisturbed, and the survivors' sum error (must be ~1e-15).

Run: ``python benchmarks/bench_churn.py [--graph grid:5x5 --runs 8]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from continuized.gossip.exchange.membership import attach_neighbors, first_view, leave_view
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.sim.churn import Change, run_churn


def main() -> None:
    """Run the comparison and print the figures (a JSON line at the end)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default="grid:5x5")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--leaver", type=int, default=24)
    ap.add_argument("--t-leave", type=float, default=100.0)
    ap.add_argument("--t-join", type=float, default=200.0)
    ap.add_argument("--join-value", type=float, default=1.0)
    ap.add_argument("--attach", type=int, default=2)
    ap.add_argument("--t-end", type=float, default=5000.0)
    args = ap.parse_args()

    topo = parse_topology(args.graph)
    view = first_view(topo.n, [(int(u), int(v)) for u, v in topo.edges])
    grid = np.arange(0.0, args.t_end + 1e-9, 10.0)
    newcomer = topo.n
    attach = attach_neighbors(
        leave_view(view, args.leaver, args.t_leave), args.attach, np.random.default_rng(0)
    )
    changes = [
        Change("leave", args.t_leave, args.leaver),
        Change("join", args.t_join, newcomer, args.join_value, tuple(attach)),
    ]
    print(
        f"{args.graph}: n={topo.n}, eta={view.eta:.4g}; "
        f"leave of {args.leaver} at t={args.t_leave:g}, "
        f"join of {newcomer} (value {args.join_value:g}, attached to {attach}) "
        f"at t={args.t_join:g}"
    )
    rows = []
    started = time.process_time()
    for r in range(args.runs):
        values = np.zeros(topo.n)
        values[0] = 1.0  # the paper's one-hot start
        base = run_churn(view, values.tolist(), [], args.t_end, np.random.default_rng(r), grid)
        churn = run_churn(
            view, values.tolist(), changes, args.t_end, np.random.default_rng(r), grid
        )
        e0 = base.error[0]
        t_base = base.t_eps(args.eps * e0)
        t_churn = churn.t_eps(args.eps * e0, after=args.t_join)
        drift = max(abs(s - g) for s, g in zip(churn.sum_x, churn.target, strict=True))
        rows.append((t_base, t_churn, drift))
        print(
            f"run {r}: undisturbed t_eps={t_base:8.0f}  churn t_eps={t_churn:8.0f}  "
            f"ratio={t_churn / t_base:5.2f}  max |sum x - members' initial sum|={drift:.1e}"
        )
    base_med = float(np.median([r[0] for r in rows]))
    churn_med = float(np.median([r[1] for r in rows]))
    ratios = [r[1] / r[0] for r in rows]
    summary = {
        "graph": args.graph,
        "runs": args.runs,
        "eps": args.eps,
        "t_eps_undisturbed_median": base_med,
        "t_eps_churn_median": churn_med,
        "ratio_of_medians": churn_med / base_med,
        "ratio_median": float(np.median(ratios)),
        "ratio_max": max(ratios),
        "max_sum_error": max(r[2] for r in rows),
        "cpu_s": time.process_time() - started,
    }
    print(
        f"median t_eps: undisturbed {base_med:.0f}, churn {churn_med:.0f}: ratio "
        f"{churn_med / base_med:.2f} (per-run median {np.median(ratios):.2f}, max "
        f"{max(ratios):.2f}; target <= 1.5)"
    )
    print(
        json.dumps(
            {
                k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                for k, v in summary.items()
            }
        )
    )


if __name__ == "__main__":
    main()
