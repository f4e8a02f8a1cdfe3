"""The chaos harness: a secured deployment under a restart policy, and a seeded schedule of
SIGKILLs against it (used by ``test_chaos.py`` and ``benchmarks/bench_chaos.py``).

The deployment is what an operator runs by hand: ``gossip keys init``, mosquitto with the keys'
password file and ACL (its retained messages saved to disk every second), ``gossip coordinator
--keys`` and one ``gossip node --keys`` per node, every one a real process on loopback. Each
runs under :class:`Supervised`, a restart policy like systemd's ``Restart=on-failure``
(``RestartSec=0.5``): a process that dies from a signal or exits with an error is started again
with the same command line; one that exits 0 (a node told to stop, the coordinator with its
summary written) has finished. The broker is restarted whatever its exit, until the harness
stops it.

Once the run has started (the coordinator's ``start`` line), :func:`chaos_schedule` decides,
from its seed alone, which processes die when: a node, the broker or the coordinator every few
seconds, sometimes two at once. The schedule ends after ``duration`` seconds or when the
coordinator decides to stop, whichever comes first; the run's rate and eps make it last
longer than the schedule when nothing is killed.

Then :meth:`ChaosResult.problems` checks what an operator relies on: eps reached, the sums
exact (drift <= 1e-9), the summary true (its drift and final error recomputed from the
nodes' own final reports, its ``t_eps`` from the exact curve in the metrics file, no figure it
did not measure) and no process left. A failing run names its seed: ``GOSSIP_CHAOS_SEED=S``
replays the same schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from continuized.coordinator.figures.metrics import estimate
from continuized.coordinator.local.broker import find_mosquitto
from continuized.coordinator.machine.children import spawn
from continuized.coordinator.machine.ports import free_port, wait_for_port
from continuized.gossip.graph.topology import parse_topology

SEED_ENV = "GOSSIP_CHAOS_SEED"
_RESTART_SEC = 0.5  # systemd's RestartSec: a crash loop does not spin
_MAX_RESTARTS = 40  # systemd's StartLimitBurst, generous: a harness bug must not loop forever
_CHECK_EPS_FACTOR = 3.0  # ARG's error is not monotone: the stop lands a period after eps


@dataclasses.dataclass(frozen=True)
class Kill:
    """One step of the schedule: SIGKILL ``victims`` ``at`` seconds after the run started."""

    at: float
    victims: tuple[str, ...]


def chaos_schedule(
    seed: int,
    nodes: int,
    *,
    duration: float = 60.0,
    gap: tuple[float, float] = (2.0, 6.0),
    control: float = 0.3,
    pair: float = 0.25,
) -> list[Kill]:
    """The kills of one chaos run, from ``seed`` alone (the same seed, the same schedule).

    Parameters
    ----------
    seed : int
        Seed of the schedule (``GOSSIP_CHAOS_SEED`` replays it).
    nodes : int
        Node processes ``node-0`` .. ``node-{nodes-1}``.
    duration : float
        Seconds of chaos after the run's start.
    gap : (float, float)
        Seconds between two kills, drawn uniformly.
    control : float
        Probability that a victim is the broker or the coordinator (half each) rather than a
        node.
    pair : float
        Probability that a step kills two distinct processes at once.

    Examples
    --------
    >>> chaos_schedule(7, 16) == chaos_schedule(7, 16)
    True
    >>> steps = chaos_schedule(7, 16)
    >>> all(2.0 <= b.at - a.at <= 6.0 for a, b in zip(steps, steps[1:]))
    True
    >>> all(any(who in k.victims for k in chaos_schedule(s, 16)) for s in range(20)
    ...     for who in ("broker", "coordinator"))
    True
    """
    rng = random.Random(seed)

    def victim() -> str:
        if rng.random() < control:
            return rng.choice(("broker", "coordinator"))
        return f"node-{rng.randrange(nodes)}"

    steps: list[Kill] = []
    at = rng.uniform(*gap)
    while at < duration:
        first = victim()
        victims = [first]
        if rng.random() < pair:
            second = victim()
            while second == first:
                second = victim()
            victims.append(second)
        steps.append(Kill(round(at, 2), tuple(victims)))
        at += rng.uniform(*gap)
    # Every schedule hits the broker and the coordinator at least once, each in a step of its
    # own (a CI run of one or two seeds must cover both): the first victim of a random step
    # that has neither becomes it.
    for target in ("broker", "coordinator"):
        if steps and not any(target in step.victims for step in steps):
            free = [
                k for k, s in enumerate(steps) if not {"broker", "coordinator"} & set(s.victims)
            ]
            if free:
                k = rng.choice(free)
                steps[k] = Kill(steps[k].at, (target, *steps[k].victims[1:]))
    return steps


def chaos_seeds(default: Sequence[int]) -> list[int]:
    """The seeds to run: ``GOSSIP_CHAOS_SEED`` (``S`` or ``S1,S2``) when set, else ``default``."""
    raw = os.environ.get(SEED_ENV, "").strip()
    if not raw:
        return list(default)
    return [int(part) for part in raw.split(",") if part.strip()]


class Supervised:
    """One process under a restart policy (see the module docstring).

    Parameters
    ----------
    name : str
        The name the schedule uses (``broker``, ``coordinator``, ``node-K``).
    argv : sequence of str
        The command line, the same for every start.
    log : Path
        Where each incarnation's stdout and stderr go (appended).
    always : bool
        Restart even after exit code 0 (the broker).
    env : dict
        The processes' environment.
    """

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: dict[str, str], always: bool = False
    ) -> None:
        self.name, self.argv, self.log, self.env, self.always = name, list(argv), log, env, always
        self.proc: asyncio.subprocess.Process | None = None
        self.pids: list[int] = []
        self.exits: list[int] = []
        self.restarts = 0
        self.kills = 0
        self.finished = asyncio.Event()
        self._closing = False

    @property
    def running(self) -> bool:
        """Whether the current incarnation is alive."""
        return self.proc is not None and self.proc.returncode is None

    async def keep(self) -> None:
        """Start the process, and start it again after each failure (the policy)."""
        try:
            while True:
                self.proc = await spawn(self.argv, log=self.log, env=self.env)
                self.pids.append(self.proc.pid)
                code = await self.proc.wait()
                self.exits.append(code)
                if self._closing or (code == 0 and not self.always):
                    return
                if self.restarts >= _MAX_RESTARTS:
                    return
                await asyncio.sleep(_RESTART_SEC)
                if self._closing:
                    return
                self.restarts += 1
        finally:
            self.finished.set()

    def kill(self) -> bool:
        """SIGKILL the current incarnation; whether there was one to kill."""
        if not self.running:
            return False
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.kills += 1
        return True

    async def close(self, within: float = 10.0) -> None:
        """Stop restarting; SIGTERM the live incarnation, SIGKILL it after ``within`` s."""
        self._closing = True
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), within)
            except TimeoutError:
                self.kill()
                await self.proc.wait()


@dataclasses.dataclass
class ChaosConfig:
    """One chaos run's deployment and schedule.

    At ``rate`` 14 to ``until`` 1e-9, grid:4x4 takes t = 460 (33 s) undisturbed. Under the
    chaos it took t = 485 on a quiet machine and up to t = 1,290 (92 s) on a loaded one, where
    restarts are slow: most of the kills land in a running run. Starting the 18 processes takes
    13-38 s on a loaded two-core machine: a seed took 81-133 s there, 47 s on a quiet one.
    """

    seed: int
    workdir: Path
    graph: str = "grid:4x4"
    rate: float = 14.0
    until: float = 1e-9
    duration: float = 60.0
    timeout: float = 150.0  # the coordinator's --timeout (after t starts)
    wall_limit: float = 240.0  # the harness gives up on the whole run after this


@dataclasses.dataclass
class ChaosResult:
    """What a chaos run did and left behind."""

    config: ChaosConfig
    schedule: list[Kill]
    done: list[Kill]  # the steps that ran (a run that ended early skips the rest)
    wall_s: float
    start_s: float | None  # seconds from the harness's start to the run's (None: never)
    restarts: dict[str, int]
    summary: dict[str, Any] | None
    finals: dict[str, dict[str, Any]]
    problems: list[str]
    left: list[str]

    @property
    def passed(self) -> bool:
        """Whether every check held."""
        return not self.problems

    def report(self) -> str:
        """The seed, the schedule and the problems: what a failing test prints to replay it."""
        lines = [
            f"chaos seed {self.config.seed} (replay: {SEED_ENV}={self.config.seed}), "
            f"wall {self.wall_s:.1f} s (the run's start at "
            f"{'never' if self.start_s is None else f'{self.start_s:.1f} s'}), "
            f"restarts {self.restarts}, logs in {self.config.workdir}",
            "schedule (s after the start: victims; * = ran):",
        ]
        ran = {id(k) for k in self.done}
        lines += [
            f"  {k.at:6.2f}{'*' if id(k) in ran else ' '} {', '.join(k.victims)}"
            for k in self.schedule
        ]
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


def _clean_env() -> dict[str, str]:
    # The children take their settings from the command line only: a GOSSIP_* variable of the
    # caller's shell (or the chaos seed) must not change them.
    return {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _gossip(*args: str) -> list[str]:
    return [sys.executable, "-m", "continuized.cli.app", *args]


async def _keys(workdir: Path, nodes: int, env: dict[str, str]) -> Path:
    keys = workdir / "keys"
    proc = await spawn(
        _gossip("keys", "init", "--dir", str(keys), "--nodes", str(nodes)),
        log=workdir / "keys.log",
        env=env,
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"gossip keys init failed: {(workdir / 'keys.log').read_text()}")
    return keys


def _mosquitto_conf(workdir: Path, keys: Path, port: int) -> Path:
    # The broker keeps its retained messages on disk, saved every second: they are the only
    # copy of the coordinator's status, and a coordinator killed with its broker (a step of two
    # victims) finds its run there when both are back. Without persistence that restart began
    # a fresh run and waited for registrations that never came (seed 2).
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous false\n"
        f"password_file {keys / 'mqtt' / 'passwd'}\nacl_file {keys / 'mqtt' / 'acl'}\n"
        f"user {getpass.getuser()}\npersistence true\npersistence_location {workdir}/\n"
        "autosave_interval 1\nlog_dest stderr\nlog_type error\nlog_type warning\n"
    )
    return conf


def _lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def _kinds(metrics: Path) -> set[str]:
    return {str(line.get("kind")) for line in _lines(metrics)}


async def wait_for_line(metrics: Path, kind: str, coordinator: Supervised, within: float) -> bool:
    """Wait for a ``kind`` line in the metrics file (False: the coordinator ended first)."""
    async with asyncio.timeout(within):
        while kind not in _kinds(metrics):
            if coordinator.finished.is_set():
                return False
            await asyncio.sleep(0.1)
    return True


def _left(workdir: Path) -> list[str]:
    """Processes still running whose command line names the run's directory."""
    left = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.info["pid"] == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(workdir) in cmdline:
            left.append(f"{proc.info['pid']}: {cmdline[:160]}")
    return left


@dataclasses.dataclass
class Deployment:
    """A secured deployment's processes, each under its restart policy (not started yet).

    Attributes
    ----------
    workdir : Path
        Keys, mosquitto's configuration, every process's log, ``run.jsonl`` and ``run.json``.
    broker, coordinator : Supervised
        mosquitto (with the keys' passwd and ACL) and ``gossip coordinator``.
    nodes : list of Supervised
        ``gossip node --keys DIR/node-K``, one per node of the graph.
    broker_port : int
        mosquitto's loopback port.
    """

    workdir: Path
    broker: Supervised
    coordinator: Supervised
    nodes: list[Supervised]
    broker_port: int

    @property
    def everyone(self) -> dict[str, Supervised]:
        """Every process by its schedule name."""
        return {s.name: s for s in (self.broker, self.coordinator, *self.nodes)}

    @property
    def metrics(self) -> Path:
        """The coordinator's ``--metrics-file`` (every incarnation appends to it)."""
        return self.workdir / "run.jsonl"

    @property
    def summary(self) -> Path:
        """The coordinator's ``--json`` summary."""
        return self.workdir / "run.json"


async def deploy(
    workdir: Path,
    graph: str,
    rate: float,
    until: float,
    *,
    seed: int,
    coordinator: Sequence[str] = (),
) -> Deployment:
    """Keys and configuration in ``workdir``, and the processes of a secured deployment of
    ``graph`` at ``rate`` to ``until`` (one-hot values); ``coordinator`` adds to its options."""
    mosquitto = find_mosquitto()
    if mosquitto is None:
        raise RuntimeError("mosquitto is not installed")
    _make_dir(workdir)
    env = _clean_env()
    n = parse_topology(graph).n
    keys = await _keys(workdir, n, env)
    port, bind = free_port(), f"tcp://127.0.0.1:{free_port()}"
    conf = _mosquitto_conf(workdir, keys, port)
    broker = Supervised(
        "broker", [mosquitto, "-c", str(conf)], workdir / "mosquitto.log", env, True
    )
    coord = Supervised(
        "coordinator",
        _gossip(
            "coordinator",
            "--graph",
            graph,
            "--broker",
            f"mqtt://127.0.0.1:{port}",
            "--bind",
            bind,
            "--keys",
            str(keys / "coordinator"),
            "--rate",
            str(rate),
            "--until",
            str(until),
            "--values",
            "onehot",
            "--cluster",
            "chaos",
            "--metrics-file",
            str(workdir / "run.jsonl"),
            "--json",
            str(workdir / "run.json"),
            "--register-timeout",
            "120",
            *coordinator,
        ),
        workdir / "coordinator.log",
        env,
    )
    nodes = [
        Supervised(
            f"node-{k}",
            _gossip(
                "node",
                "--coordinator",
                bind,
                "--keys",
                str(keys / f"node-{k}"),
                "--host",
                "127.0.0.1",
                "--seed",
                str(seed * 1000 + k),
            ),
            workdir / f"node-{k}.log",
            env,
        )
        for k in range(n)
    ]
    return Deployment(workdir, broker, coord, nodes, port)


@contextlib.asynccontextmanager
async def running(deployment: Deployment) -> AsyncIterator[None]:
    """Start every process under its policy; on exit, close them all (SIGTERM, then SIGKILL)."""
    async with asyncio.TaskGroup() as tg:
        tasks = [
            tg.create_task(s.keep(), name=f"keep-{s.name}") for s in deployment.everyone.values()
        ]
        try:
            await wait_for_port("127.0.0.1", deployment.broker_port, 30.0, deployment.broker.proc)
            yield
        finally:
            # All at once: a node told to stop lingers up to 10 s for its neighbours' goodbyes.
            await asyncio.gather(
                deployment.coordinator.close(), *(s.close() for s in deployment.nodes)
            )
            await deployment.broker.close()
            for task in tasks:
                task.cancel()


async def run_chaos(config: ChaosConfig) -> ChaosResult:
    """Deploy, run the schedule of ``config.seed``, wait for the end, check (see the module)."""
    started = time.monotonic()
    dep = await deploy(
        config.workdir, config.graph, config.rate, config.until, seed=config.seed,
        coordinator=("--timeout", str(config.timeout)),
    )  # fmt: skip
    coordinator, nodes, everyone = dep.coordinator, dep.nodes, dep.everyone
    n = len(nodes)
    schedule = chaos_schedule(config.seed, n, duration=config.duration)
    done: list[Kill] = []
    problems: list[str] = []
    start_s = None
    async with running(dep):
        if await wait_for_line(dep.metrics, "start", coordinator, 150.0):
            t0 = time.monotonic()
            start_s = t0 - started
            for step in schedule:
                await asyncio.sleep(max(0.0, t0 + step.at - time.monotonic()))
                # The run is ending: its stop and final reports are not the chaos's target.
                if coordinator.finished.is_set() or "stop" in _kinds(dep.metrics):
                    break
                for name in step.victims:
                    everyone[name].kill()
                done.append(step)
        remaining = config.wall_limit - (time.monotonic() - started)
        try:
            await asyncio.wait_for(coordinator.finished.wait(), max(remaining, 1.0))
        except TimeoutError:
            problems.append(f"the coordinator had not ended after {config.wall_limit:g} s")
        try:  # the nodes stop on the coordinator's command, within their linger
            await asyncio.wait_for(asyncio.gather(*(s.finished.wait() for s in nodes)), 60.0)
        except TimeoutError:
            alive = [s.name for s in nodes if not s.finished.is_set()]
            problems.append(f"nodes still running 60 s after the coordinator ended: {alive}")
    wall = time.monotonic() - started
    await asyncio.sleep(0.5)  # let the last exits be reaped before looking for leftovers
    left = _left(config.workdir)
    summary = json.loads(dep.summary.read_text()) if dep.summary.exists() else None
    finals = {s.name: f for s in nodes if (f := _final(s.log)) is not None}
    problems += check(summary, finals, _lines(dep.metrics), config, n)
    problems += [f"process left: {p}" for p in left]
    for s in (coordinator, *nodes):
        if s.restarts >= _MAX_RESTARTS:
            problems.append(f"{s.name} hit the restart limit: exits {s.exits}")
    return ChaosResult(
        config=config,
        schedule=schedule,
        done=done,
        wall_s=wall,
        start_s=start_s,
        restarts={s.name: s.restarts for s in everyone.values() if s.restarts},
        summary=summary,
        finals=finals,
        problems=problems,
        left=left,
    )


def _final(log: Path) -> dict[str, Any] | None:
    """The node's final report (the last incarnation's ``"final": true`` line on stdout)."""
    finals = [line for line in _lines(log) if line.get("final") is True]
    return finals[-1] if finals else None


def check(
    summary: dict[str, Any] | None,
    finals: dict[str, dict[str, Any]],
    metrics: list[dict[str, Any]],
    config: ChaosConfig,
    n: int,
) -> list[str]:
    """What an operator relies on (the module docstring); each problem as a sentence."""
    if summary is None:
        return ["no summary: the coordinator never wrote --json"]
    problems = []
    if not summary.get("reached") or summary.get("stop_reason") != "reached":
        problems.append(
            f"eps not reached: stop_reason={summary.get('stop_reason')!r}, "
            f"failure={summary.get('failure')!r}"
        )
    drift = summary.get("mass_drift_rel")
    if drift is None or drift > 1e-9:
        problems.append(f"the sums are not exact: mass_drift_rel={drift!r} (want <= 1e-9)")
    missing = summary.get("missing_finals") or []
    if missing:
        problems.append(f"final reports missing in the summary: {missing}")
    if summary.get("restarts"):
        problems.append(
            f"the summary counts restarts it cannot see: {summary['restarts']} (the policy's)"
        )
    starts = [line for line in metrics if line.get("kind") == "start"]
    eta = float(starts[0]["params"]["eta"]) if starts else 0.0
    problems += _check_against_finals(summary, finals, n, eta)
    problems += _check_t_eps(summary, metrics, config.until)
    return problems


def _check_against_finals(
    summary: dict[str, Any], finals: dict[str, dict[str, Any]], n: int, eta: float
) -> list[str]:
    """The summary's drift and final error against the nodes' own final reports, mixed to
    their latest t with the run's ``eta`` (from its ``start`` line)."""
    if len(finals) != n:
        absent = sorted(set(f"node-{k}" for k in range(n)) - set(finals))
        if summary.get("final_error") is not None:
            return [f"the summary gives a final error though {absent} wrote no final report"]
        return [f"no final report in the logs of {absent}"]
    rows = sorted(finals.values(), key=lambda f: int(f["node"]))
    t = np.array([float(f["t"]) for f in rows])
    x = np.array([f["x"] for f in rows], dtype=np.float64)
    z = np.array([f["z"] for f in rows], dtype=np.float64)
    initial = np.zeros_like(x)
    initial[0] = 1.0  # --values onehot
    problems = []
    mine = estimate(t, x, z, initial, eta)
    drift = summary.get("mass_drift_rel")
    if drift is not None and abs(mine.mass_drift_rel - float(drift)) > 1e-9:
        problems.append(
            f"the summary's drift {drift!r} is not the nodes' final reports' "
            f"{mine.mass_drift_rel!r}"
        )
    if mine.mass_drift_rel > 1e-9:
        problems.append(f"the nodes' final reports drift by {mine.mass_drift_rel:.3g}")
    error, at = summary.get("final_error"), summary.get("final_t")
    eps = summary.get("eps")
    if error is None:
        problems.append("the summary's final error is unknown though every node reported")
        return problems
    if eps is not None and float(error) > _CHECK_EPS_FACTOR * float(eps):
        problems.append(f"the summary's final error {error!r} is above {_CHECK_EPS_FACTOR:g} eps")
    if at is not None:
        # The summary gives the error at its final_t (the stop's t when the final states can be
        # mixed back to it): the same mix of the nodes' own reports must give the same figure.
        theirs = estimate(t, x, z, initial, eta, at=float(at)).error
        if abs(theirs - float(error)) > 1e-6 * max(abs(theirs), 1e-300) + 1e-18:
            problems.append(
                f"the summary's final error {error!r} at t={at} is not the nodes' final "
                f"reports' {theirs!r}"
            )
    return problems


def _check_t_eps(summary: dict[str, Any], metrics: list[dict[str, Any]], eps: float) -> list[str]:
    """The summary's t_eps is the exact curve's first crossing of eps in the metrics file."""
    t_eps = summary.get("t_eps")
    exact = [(float(p["t"]), float(p["error"])) for p in metrics if p.get("kind") == "exact"]
    below = [t for t, e in exact if e <= eps]
    if t_eps is None:
        return [] if not below else [f"t_eps unknown though the exact curve crossed at {below[0]}"]
    if not exact:
        return [f"t_eps={t_eps} with no exact curve in the metrics file"]
    if not any(abs(t - float(t_eps)) <= 1e-9 for t in below):
        return [f"t_eps={t_eps} is not a point of the exact curve at or below eps"]
    return []
