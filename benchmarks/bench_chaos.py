"""The chaos test over many seeds: pass/fail, wall time and restarts per seed.

Run with ``python benchmarks/bench_chaos.py`` (10 seeds, about 2 minutes each on two cores).
Each seed deploys a secured grid:4x4 (mosquitto with passwords and an ACL, ``gossip
coordinator``, 16 ``gossip node``), every process under a restart policy, and SIGKILLs a
node, the broker or the coordinator every 2-6 s for 60 s, sometimes two at once
(``tests/coordinator/_chaos.py``). A seed passes when eps is reached, the sums are exact
(drift <= 1e-9), the summary agrees with the nodes' final reports and the exact curve, and no
process is left. Target: 10 of 10, each under 2 minutes.

``--seeds 3,17`` (or ``GOSSIP_CHAOS_SEED=3,17``) replays given seeds; ``--keep`` keeps each
run's directory (logs, metrics, summary) for a look after a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "coordinator"))

from _chaos import ChaosConfig, chaos_seeds, run_chaos
from machine import background_cores


async def _main(args: argparse.Namespace) -> int:
    seeds = (
        [int(s) for s in args.seeds.split(",")] if args.seeds else chaos_seeds(range(args.count))
    )
    print(f"load: {await background_cores():.2f} cores busy before the runs")
    print(
        f"{'seed':>5} {'result':>6} {'wall_s':>7} {'start_s':>7} {'t_eps':>6} {'kills':>5} "
        f"{'restarts':>8}  detail"
    )
    passed = 0
    started = time.monotonic()
    for seed in seeds:
        workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
        config = ChaosConfig(
            seed=seed, workdir=workdir, rate=args.rate, until=args.until, duration=args.duration
        )
        result = await run_chaos(config)
        kills = sum(len(k.victims) for k in result.done)
        restarts = sum(result.restarts.values())
        verdict = "pass" if result.passed else "FAIL"
        fast = result.wall_s < 120.0
        detail = ", ".join(f"{k} x{v}" for k, v in sorted(result.restarts.items()))
        if not fast:
            detail = "over 2 min; " + detail
        start = "-" if result.start_s is None else f"{result.start_s:.1f}"
        t_eps = (result.summary or {}).get("t_eps")
        t_text = "unknown" if t_eps is None else f"{t_eps:.0f}"
        print(
            f"{seed:>5} {verdict:>6} {result.wall_s:7.1f} {start:>7} {t_text:>6} {kills:>5} "
            f"{restarts:>8}  {detail}"
        )
        if result.passed:
            passed += 1
        else:
            print(result.report(), file=sys.stderr)
        if result.passed and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{passed}/{len(seeds)} seeds passed in {time.monotonic() - started:.0f} s "
        f"(load after: {await background_cores():.2f} cores)"
    )
    return 0 if passed == len(seeds) else 1


def main() -> int:
    """Parse the options and run the seeds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10, help="seeds 0..COUNT-1")
    parser.add_argument("--seeds", default="", help="comma-separated seeds (replaces --count)")
    parser.add_argument("--rate", type=float, default=ChaosConfig.rate)
    parser.add_argument("--until", type=float, default=ChaosConfig.until)
    parser.add_argument(
        "--duration", type=float, default=ChaosConfig.duration, help="seconds of kills (0: none)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the passing runs' files too")
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
