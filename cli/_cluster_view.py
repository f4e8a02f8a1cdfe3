"""What the cluster commands show: status lines, the progress bar, the summary, the held page.

User data (graph specs, file names) is printed verbatim (:func:`cli._errors.plain_console`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import typer

from continuized.cli._errors import plain_console
from continuized.cli._tables import figures_table

if TYPE_CHECKING:
    from continuized.coordinator.figures.records import RunSummary
    from continuized.coordinator.figures.state import ClusterState
    from continuized.coordinator.local.supervise import Supervision
    from continuized.coordinator.run.service import CoordinatorConfig

__all__ = [
    "fell_behind",
    "hold_dashboard",
    "print_failure",
    "print_summary",
    "progress_bar",
    "starts_in",
    "timeout_advice",
    "with_log_lines",
]

# A run whose achieved rate is below this share of the asked one did not keep up, even when no
# node reported its tick wait (``kept_up`` unknown).
_KEPT_UP_SHARE = 0.9


def hold_dashboard(state: ClusterState, config: CoordinatorConfig, seconds: float) -> None:
    """Serve the dashboard of the finished run for ``seconds`` (``inf``: until interrupted).

    The run's own dashboard closed with the run; this one serves the same final state, so a
    user of ``docker compose up`` can still look at the result.
    """
    import asyncio
    import math

    from continuized.coordinator.dashboard import serve
    from continuized.coordinator.run.companions import announce_dashboard

    async def serve_for() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(None if math.isinf(seconds) else seconds):
                await serve(
                    state,
                    config.dashboard_host,
                    config.dashboard_port if config.dashboard_port is not None else 8080,
                    config.dashboard_token or None,
                    runs_dir=config.dashboard_runs_dir,
                    on_ready=announce_dashboard,
                )

    kept = "until Ctrl-C" if math.isinf(seconds) else f"for {seconds:g} s (Ctrl-C ends it)"
    typer.echo(f"run over; dashboard kept up {kept}", err=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_for())


async def with_log_lines(main: Any, state: ClusterState) -> Any:
    """Run ``main`` while printing one status line to stderr every few seconds."""
    import asyncio
    import time

    from continuized.coordinator.figures.records import error_text

    async def lines() -> None:
        last = ""
        while True:
            await asyncio.sleep(2.0)
            err = state.error
            if state.runs:  # over: the run's exact final error, the one the summary shows
                line = f"[{state.phase}] final error {error_text(state.runs[-1].final_error)}"
            elif err is not None:
                when = starts_in(state.epoch, time.time()) or f"t={max(state.t, 0.0):.0f}"
                line = (
                    f"[{state.phase}] {when} error estimate={err:.3e} "
                    f"alive={state.nodes_alive()}/{state.expected}"
                )
            else:
                line = f"[{state.phase}] {state.message}"
            if line != last:
                typer.echo(line, err=True)
                last = line

    from continuized.coordinator.run._groups import single_error

    with single_error():
        async with asyncio.TaskGroup() as tg:
            ticker = tg.create_task(lines(), name="status-lines")
            try:
                return await main
            finally:
                ticker.cancel()


async def progress_bar(holder: dict[str, Any]) -> None:
    """Show the live error, t and activations/s until cancelled.

    Nothing is drawn until ``holder["state"]`` exists (the broker is up and the run starts): a
    run refused before then shows its error alone.
    """
    import asyncio
    import math
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from continuized.coordinator.figures.records import error_text

    while holder.get("state") is None:  # noqa: ASYNC110 -- set by a plain callback, no event
        await asyncio.sleep(0.05)

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("error {task.fields[error]}"),
        TextColumn("{task.fields[t]}"),
        TextColumn("{task.fields[speed]} act/s"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False, console=plain_console()) as progress:
        task = progress.add_task("registering", total=1.0, error="-", t="t -", speed="-")
        last: tuple[float, int] | None = None
        while True:
            try:
                await asyncio.sleep(0.25)
            except asyncio.CancelledError:
                # The run is over: the last line shows the run's achieved rate (the nodes
                # have stopped, so the current speed would read 0), its exact final error,
                # the summary's (the last estimate is not the run's error), and the t the
                # final reports reached (the last drawn may be long before, on a busy machine).
                final: ClusterState | None = holder.get("state")
                if final is not None:
                    run = final.runs[-1] if final.runs else None
                    error = None if run is None else run.final_error
                    progress.update(
                        task,
                        description=f"{final.phase} {final.algorithm} {final.graph}",
                        error=f"{error_text(error)} (final)",
                        t=f"t {max(final.t, 0.0):.0f}",
                        speed="-"
                        if run is None or run.rate_achieved is None
                        else f"{run.rate_achieved:.0f}",
                    )
                raise
            state: ClusterState | None = holder.get("state")
            if state is None:
                continue
            done = 0.0
            err = state.error
            if err is not None and state.history:
                e0 = max(state.history[0].error, state.eps * 10)
                span = math.log(e0 / state.eps)
                done = min(1.0, max(0.0, math.log(e0 / max(err, 1e-300)) / span))
            now, acts = time.time(), state.activations()
            speed = "-"
            if last is not None and now > last[0]:
                speed = f"{(acts - last[1]) / (now - last[0]):.0f}"
            last = (now, acts)
            progress.update(
                task,
                completed=1.0 if state.reached else done,
                description=f"{state.phase} {state.algorithm} {state.graph}",
                error=f"{err:.2e}" if err is not None else "-",
                t=starts_in(state.epoch, now) or f"t {max(state.t, 0.0):.0f}",
                speed=speed,
            )


def starts_in(epoch: float | None, now: float) -> str | None:
    """``starts in 9 s`` while the shared t has not started (``now`` before ``epoch``), else None.

    The nodes report before t = 0 too, so the latest estimate may carry a negative t: the
    status shows this instead, and a t at or above 0 once the run has started.
    """
    import math

    if epoch is None or now >= epoch:
        return None
    return f"starts in {math.ceil(epoch - now):.0f} s"


def _restarts(sup: Supervision) -> str:
    """``2 (node-3 x1, node-4 x1)``: the restarts of the run, per process."""
    total = sum(sup.restarts.values())
    each = ", ".join(f"{name} x{count}" for name, count in sorted(sup.restarts.items()))
    return f"{total} ({each})" if total else "0"


def print_failure(sup: Supervision, state: ClusterState, config: CoordinatorConfig) -> None:
    """Print what is known of a run that failed (no summary): why, where it was, restarts."""
    err = state.error
    table = figures_table(
        f"{state.algorithm} on {state.graph}: run {state.run_id or '-'} failed",
        ["quantity", "value"],
    )
    table.add_row("reached eps", f"False (eps {config.until:g})")
    table.add_row("failure", sup.failure or "-")
    # No final reports: the last estimate is all there is, and it is named so.
    table.add_row(
        "last t / error (estimate)",
        f"{state.t:.1f} / {'unknown' if err is None else format(err, '.3e')}",
    )
    table.add_row("final error", "unknown")
    table.add_row("restarts", _restarts(sup))
    plain_console().print(table)


def fell_behind(summary: RunSummary, rate: float, nodes: int) -> str:
    """Say that the run's ticks waited too long, by how much, and what to do about it."""
    from continuized.gossip.exchange.lateness import KEEP_UP_GAPS, mean_gap

    # Nodes older than the wait report only the lag, which was the same figure then.
    p50 = summary.lag_p50 if summary.wait_p50 is None else summary.wait_p50
    p99 = summary.lag_p99 if summary.wait_p99 is None else summary.wait_p99
    return (
        f"the cluster fell behind --rate {rate:g}: a typical node's ticks waited "
        f"{p50 or 0.0:.3g} t to start (median; p99 {p99 or 0.0:.3g} t), more than "
        f"{KEEP_UP_GAPS:g} x the {mean_gap(nodes):.3g} t between two activations of a node: "
        "they pile up. Its curve is then not the "
        "simulator's, and accelerated gossip may diverge. Try a lower --rate, or "
        "--nodes-per-process to share processes between nodes."
    )


def _exact_points(summary: RunSummary) -> str:
    """``412``, ``412 (stopped after t=...: the members changed)`` or ``not collected: ...``:
    never a bare 0 for a curve that was not collected."""
    if not summary.exact_points:
        return summary.exact_note or "0"
    note = f" ({summary.exact_note})" if summary.exact_note else ""
    return f"{summary.exact_points}{note}"


def _partial(reported: int, members: int) -> str:
    """What a count summed over the nodes' reports misses: the nodes never heard from."""
    if not members or reported >= members:
        return ""
    return f" (at least: reports from {reported} of {members} nodes)"


def _judged(timed: int, members: int) -> str:
    """Which nodes a median over the nodes' percentiles stands for, when not all of them."""
    if not members or timed >= members:
        return ""
    if timed == 0:
        return " (no node measured it)"
    return f" (from {timed} of {members} nodes)"


def timeout_advice(summary: RunSummary, state: ClusterState, timeout: float) -> str:
    """Which way to turn the knobs after a run that stopped at ``--timeout`` short of eps.

    The direction comes from the run's measured figures: a cluster that fell behind its rate
    (``kept_up`` False, or an achieved rate below 90% of the asked one) needs a lower
    ``--rate``; one that kept up simply ran out of t, and needs t to advance faster (a higher
    ``--rate``), for longer (``--timeout``), or less of it (a looser ``--until``). For averaging
    runs the t still needed is estimated from the theorem's bound on the expected error,
    ``bound_factor e0 exp(-theta t)``, with ``e0`` the first measured error.
    """
    asked, achieved = summary.rate_asked, summary.rate_achieved
    measured = "an unknown rate" if achieved is None else f"{achieved:.0f}/s"
    if summary.kept_up is None and achieved is None:
        return (
            f"whether the cluster kept up with --rate {asked:g} is unknown: no node's reports "
            "measured it (see the final reports above); try a lower --rate, or "
            "--nodes-per-process, and a longer --timeout"
        )
    behind = summary.kept_up is False or (
        summary.kept_up is None and achieved is not None and achieved < _KEPT_UP_SHARE * asked
    )
    if behind:
        return (
            f"the cluster fell behind --rate {asked:g} (it achieved {measured}): try a "
            "lower --rate, or --nodes-per-process, so that it keeps up, and a longer --timeout "
            "for the t it then needs"
        )
    t_end = state.final.t if state.final is not None else state.t
    kept = (
        f"the cluster kept up with --rate {asked:g} ({measured} achieved), but t only "
        f"reached {t_end:.0f} in {timeout:g} s"
    )
    need = _bound_t(state)
    if need is None or need <= t_end:
        return (
            f"{kept}: let t advance faster or further, with a higher --rate (if this machine "
            "keeps up), a longer --timeout, or a looser --until"
        )
    return (
        f"{kept}, and the theorem's bound on the expected error reaches {state.eps:g} at "
        f"t = {need:.0f}: try a higher --rate (about {need / timeout:.0f}/s for --timeout "
        f"{timeout:g}, if this machine keeps up), a longer --timeout (about {need / asked:.0f} "
        "s at this rate), or a looser --until"
    )


def _bound_t(state: ClusterState) -> float | None:
    """The t at which the theorem's bound falls to eps (``None``: unknown, or no bound)."""
    import math

    params = state.params
    if state.optimization is not None or params is None or params.theta <= 0:
        return None
    first = state.exact[0] if state.exact else (state.history[0] if state.history else None)
    if first is None or not first.error > 0 or not state.eps > 0:
        return None
    return first.t + max(
        0.0, math.log(params.bound_factor * first.error / state.eps) / params.theta
    )


def print_summary(
    summary: RunSummary,
    state: ClusterState,
    config: CoordinatorConfig,
    sup: Supervision | None = None,
) -> None:
    """Print the run's headline figures as a table on stdout (with ``sup``: its restarts)."""

    from continuized.coordinator.figures.records import error_text

    def num(value: float | None, fmt: str) -> str:
        # A figure the run did not measure is unknown, never a stand-in.
        return "unknown" if value is None else format(value, fmt)

    def to_eps(value: float | None, fmt: str, reached: bool) -> str:
        return num(value, fmt) if reached or value is not None else "not reached"

    table = figures_table(
        f"{state.algorithm} on {state.graph}: run {summary.run_id}", ["quantity", "value"]
    )
    rows = [
        ("reached eps", f"{summary.reached} (eps {config.until:g})"),
        ("t to eps (exact curve)", to_eps(summary.t_eps, ".1f", summary.reached)),
        ("wall time to eps (s)", to_eps(summary.wall_s, ".2f", summary.reached)),
        (
            "t to eps (estimate)",
            # The run stops on the exact curve, often before the estimate confirms eps.
            "not yet at the stop"
            if summary.reached and summary.t_eps_estimate is None
            else to_eps(summary.t_eps_estimate, ".1f", False),
        ),
        ("activations", str(summary.activations) + _partial(summary.reported, summary.members)),
        (
            "rate achieved / asked (1/s)",
            f"{num(summary.rate_achieved, '.0f')} / {summary.rate_asked:g}",
        ),
        ("final error", error_text(summary.final_error)),
        ("mass drift (relative)", num(summary.mass_drift_rel, ".2e")),
        (
            "round trip p50 / p99 (ms)",
            f"{num(summary.rtt_p50_ms, '.2f')} / {num(summary.rtt_p99_ms, '.2f')}"
            + _judged(summary.timed, summary.members),
        ),
        (
            "jump lag p50 / p99 (t)",
            f"{num(summary.lag_p50, '.2f')} / {num(summary.lag_p99, '.2f')}",
        ),
        (
            "tick wait p50 / p99 (t)",
            f"{num(summary.wait_p50, '.2f')} / {num(summary.wait_p99, '.2f')}"
            + {True: ": kept up", False: ": fell behind", None: ""}[summary.kept_up]
            + _judged(summary.timed, summary.members),
        ),
        ("exact curve points", _exact_points(summary)),
    ]
    if summary.ready_after_s is not None:
        rows.append(("every node ready after (s)", f"{summary.ready_after_s:.1f}"))
    first, every = num(summary.first_exchange_s, ".2f"), num(summary.all_exchanged_s, ".2f")
    rows.append(("first exchange after t = 0 (s)", f"{first}, every node's by {every}"))
    if summary.finals_wait_s is not None and summary.members:
        came = summary.members - len(summary.missing_finals)
        rows.append(
            (
                "final reports",
                f"{came} of {summary.members}, the last {summary.finals_wait_s:.1f} s after the "
                "stop"
                if came
                else f"none of {summary.members} within {summary.finals_wait_s:.1f} s of the stop",
            )
        )
    if summary.missing_finals:  # why the final error and the drift are unknown
        names = summary.missing_finals
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        rows.append(
            (
                "final reports missing",
                f"{len(names)} ({shown}): final error and drift unknown",
            )
        )
    if state.optimization is not None:
        opt = state.optimization.summary()
        rows[6] = ("final sum |x_v - x*|^2", rows[6][1])
        rows[7] = ("dual sums drift |sum y| + |sum z|", num(opt["dual_drift"], ".2e"))
        rows += [
            ("problem / data / split", f"{opt['problem']} / {opt['data']} / {opt['split']}"),
            ("objective gap F(xbar) - F(x*)", num(opt["gap"], ".3e")),
            ("consensus sum |x_v - xbar|^2", num(opt["consensus"], ".3e")),
        ]
        if opt["no_check_reason"]:
            rows.append(("no distance to x*", opt["no_check_reason"]))
    if state.training is not None:
        train = state.training.summary()
        where = "final reports" if train["final_exact"] else "latest exact point"
        at = "" if train["t"] is None else f" (t = {train['t']:.1f}, {where})"
        if train["lr"] > 0:
            # The steps move the sum of the models: these two measure gossip, not training.
            rows[6] = ("final sum 1/2 |x_v - mean of the initial models|^2", rows[6][1])
            rows[7] = ("sum of the models' drift (relative; the steps move it)", rows[7][1])
        rows[:6] = _training_rows(summary, state, config)
        rows += [
            ("model / data / split", f"{train['model']} / {train['data']} / {train['split']}"),
            (
                "rate-com / lr / momentum",
                f"{train['rate_com']:g} / {train['lr']:g} / {train['momentum']:g}",
            ),
            ("test accuracy of the average model" + at, num(train["accuracy"], ".4f")),
            ("mean accuracy of the nodes' own models", num(train["node_accuracy"], ".4f")),
            ("training loss of the average model", num(train["loss"], ".4g")),
            ("consensus distance (1/n) sum |x_v - xbar|^2", num(train["consensus"], ".3e")),
            ("accuracy curve against the simulator", _training_verdict(train["agreement"])),
        ]
    if sup is not None:
        rows.append(("restarts", _restarts(sup)))
        if sup.failure is not None:
            rows.append(("failure", sup.failure))
    for key, value in rows:
        table.add_row(key, value)
    plain_console().print(table)


def _training_rows(
    summary: RunSummary, state: ClusterState, config: CoordinatorConfig
) -> list[tuple[str, str]]:
    """A training run's first rows: its target (an accuracy, or an error) and its rates per
    node (gradient steps) and per network (exchanges), by :func:`training_figures`."""
    from continuized.coordinator.run.outcome import training_figures

    def num(value: float | None, fmt: str) -> str:
        return "unknown" if value is None else format(value, fmt)

    def to(value: float | None, fmt: str, reached: bool) -> str:
        return num(value, fmt) if reached or value is not None else "not reached"

    figures = training_figures(summary, state, config.rate)
    ((kind, level),) = figures["target"].items()
    target = f"{kind} {level:g}"
    option = "--until-accuracy" if kind == "accuracy" else "--until"
    reached = summary.reached
    return [
        (f"reached {kind}", f"{reached} ({option} {level:g})"),
        (f"t to {target} (exact curve)", to(figures["t_target"], ".1f", reached)),
        (f"wall time to {target} (s)", to(figures["wall_s_target"], ".2f", reached)),
        (
            f"t to {target} (estimate)",
            "not yet at the stop"
            if reached and figures["t_target_estimate"] is None
            else to(figures["t_target_estimate"], ".1f", False),
        ),
        ("exchanges", str(summary.activations) + _partial(summary.reported, summary.members)),
        (
            "steps/s per node (achieved / asked)",
            f"{num(figures['rate_per_node_achieved'], '.1f')} / {figures['rate_per_node_asked']:g}",
        ),
        (
            "exchanges/s in all (achieved / asked)",
            f"{num(figures['rate_network_achieved'], '.0f')} / {figures['rate_network_asked']:.4g}",
        ),
    ]


def _training_verdict(agreement: dict[str, Any]) -> str:
    """The training summary's verdict in one cell: typical or not, and its figures."""
    if agreement["typical"] is None:
        return f"unknown ({agreement['status']})"
    word = "typical" if agreement["typical"] else "ATYPICAL"
    offset = agreement["offset_decades"]
    return (
        f"{word} of the model's {agreement['null_runs']} runs (alpha {agreement['alpha']:.2g}): "
        f"{agreement['inside']:.0%} of {agreement['points']} points to t = "
        f"{agreement['t_max']:g} in its 5-95% band (p = {agreement['p_inside']:.3f}), "
        "test error offset "
        + (
            "unknown"
            if offset is None
            else f"{offset:+.3f} decades (p = {agreement['p_offset']:.3f})"
        )
    )
