"""The coordinator's settings, checked, and what they determine before any node registers."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from continuized.coordinator.figures.optimization import OptTracker, prepare_task
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_measure import LIVE_MAX_DIM, TrainTracker, report_period
from continuized.coordinator.membership.plan import Plan
from continuized.gossip.errors import ConfigError
from continuized.gossip.files.destinations import check_dir_destination, check_file_destination
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import (
    AVERAGING,
    Algorithm,
    GossipParams,
    check_algorithm,
    gossip_params,
    parse_algorithm,
)
from continuized.gossip.wire.checks import MAX_RAW_DIM
from continuized.gossip.wire.pubsub import check_cluster, parse_broker, redact_broker

if TYPE_CHECKING:  # the trainer's imports take a second: a gossip run does not pay them
    from continuized.coordinator.membership.security import Security
    from continuized.gossip.train.recipe import Recipe

__all__ = [
    "BROKER_WAIT",
    "START_PER_NODE",
    "TRAINING_REPORT_PERIOD",
    "CoordinatorConfig",
    "check_positive",
    "prepare",
    "secured",
]

BROKER_WAIT = 30.0
"""Seconds a coordinator waits for its first connection to the broker before it gives up,
naming the broker (:meth:`coordinator.mqtt.link.MqttLink.reached`): long enough for a broker
started alongside it (or restarted with it, under a restart policy) and for a slow machine's
first connection (a Pi's install under emulation took more than 5 s), short enough that a
broker that is not there is said long before the registration timeout."""

START_PER_NODE = 0.002
"""Least seconds from the bootstrap to t = 0 per node. 4,096 nodes in 64 host processes on a
2-core machine built their last nodes 9 s after the bootstrap; with 1.5 s every one of them came
to life after t = 0, behind on its clock from the first tick."""

TRAINING_REPORT_PERIOD = 2.0
"""Least seconds between two reports of a training node (each carries its parameters)."""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The settings of ``gossip coordinator`` (and of the coordinator inside ``gossip up``).

    Attributes
    ----------
    graph : str
        Topology spec, e.g. ``grid:4x4``.
    expect : int or None
        Nodes to wait for; must equal the topology's node count (``None``: that count).
    broker : str
        ``mqtt://host:port`` for metrics, as the nodes reach it; ``""``: no metrics (the
        coordinator only bootstraps and keeps answering registrations).
    bind : str
        ZeroMQ address of the registration ROUTER.
    algorithm : str
        ``arg`` or ``rg``; with ``problem``, ``acd``; ``""``: the default (``arg``, ``acd``).
    rate : float
        Network-wide activations per second.
    values : str or None
        Initial values chosen by the experiment (``onehot``, ``gaussian:SEED``, ``file:PATH``,
        ...); ``None``: every node brings its own (``gossip node --value``).
    dim : int
        Components of every value.
    until : float
        Target error eps.
    cluster : str
        Cluster name (MQTT topics ``gossip/<cluster>/...``).
    metrics_file, json_path : Path or None
        JSON-lines metrics file; summary JSON file.
    metrics_period : float
        Seconds between two reports of a node and between two evaluations.
    register_timeout : float
        Seconds to wait for every node to register.
    start_delay : float
        Seconds from the bootstrap to the epoch (``t = 0``); at least :data:`START_PER_NODE`
        per node (8.2 s at 4,096 nodes), the time their processes take to build them.
    stop_timeout : float
        Seconds to wait for the final reports after the stop command, on top of the 8.5 s a
        node may settle, and counted again from each report of a member still without its
        final one (it is alive and settling); at most 6 times this, plus the 8.5 s.
    run_timeout : float or None
        Stop (without having reached eps) this many seconds after the epoch.
    keep_running : bool
        Never send the stop command; measure until cancelled.
    broker_deadline : float or None
        Stop the run once the broker has been unreachable this many seconds in a row, as a
        failure naming the broker (``None``: wait for it as long as the run lasts). A broker
        that comes back sooner costs nothing: everyone reconnects and resumes.
    broker_wait : float
        Seconds to wait for the first connection to the broker (:data:`BROKER_WAIT`); a
        broker not reached by then, or one that refuses the login, ends the command with an
        error naming it.
    dead_after : float or None
        Declare a node dead after this many seconds without a report, and remove it from the
        membership (:mod:`coordinator.run.roster`); ``None``: never.
    allow_joins : bool
        After the bootstrap, attach a node registering under a new name with its value
        (``gossip node --join``) instead of refusing it.
    weighted : bool
        Edge probabilities proportional to edge weights (``file:`` topologies).
    resume : bool
        Adopt a running run found on the retained status topic.
    dashboard_port, dashboard_host, dashboard_token
        Serve the dashboard (``coordinator.dashboard``) when a port is given.
    dashboard_runs_dir : Path or None
        Where the dashboard saves finished runs and finds earlier ones to overlay.
    keys : Path or None
        The coordinator's key directory (``gossip keys init``: ``DIR/coordinator``): CurveZMQ
        registration, the allow-list, MQTT credentials per role. ``None``: insecure.
    mqtt_ca : Path or None
        CA certificate to check an ``mqtts://`` broker with (default: the system's).
    problem, data, split : str
        An optimization run (``problem`` not empty, e.g. ``logistic:0.01``): the problem, the
        data source and how it is split among the nodes (:mod:`coordinator.figures.optimization`).
    until_accuracy : float or None
        With ``training``: stop once the average model's test accuracy, measured exactly at
        the report grid (:mod:`coordinator.figures.train_measure`), reaches it.
    training : Recipe or None
        A training run (``gossip up --train``, :mod:`gossip.train.recipe`): the nodes train a
        model, each on its own shard; ``t`` counts gradient steps per node and ``rate`` is
        gradient steps per node per second.
    training_runs : int
        With ``training``: the simulator's runs behind the band and the verdict
        (:mod:`coordinator.figures.train_measure`), a third for the band and the rest to judge the
        live accuracy curve among; 0: neither. The band's last t shrinks as they grow
        (:data:`~coordinator.figures.train_measure.TRAIN_BAND_BUDGET`).
    """

    graph: str = "grid:4x4"
    expect: int | None = None
    broker: str = ""
    bind: str = "tcp://0.0.0.0:5555"
    algorithm: str = ""
    rate: float = 500.0
    values: str | None = None
    dim: int = 1
    until: float = 1e-6
    cluster: str = "gossip"
    metrics_file: Path | None = None
    json_path: Path | None = None
    metrics_period: float = 0.1
    register_timeout: float = 60.0
    start_delay: float = 1.5
    stop_timeout: float = 10.0
    run_timeout: float | None = None
    keep_running: bool = False
    dead_after: float | None = None
    broker_deadline: float | None = None
    broker_wait: float = BROKER_WAIT
    allow_joins: bool = False
    weighted: bool = False
    resume: bool = True
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    dashboard_token: str = ""
    dashboard_runs_dir: Path | None = None
    keys: Path | None = None
    mqtt_ca: Path | None = None
    problem: str = ""
    data: str = ""
    split: str = ""
    training: Recipe | None = None
    until_accuracy: float | None = None
    training_runs: int = 150


def check_positive(name: str, value: float) -> None:
    """Refuse ``value`` of option ``name`` unless it is a finite number > 0.

    Raises
    ------
    ConfigError
        Naming ``name`` and the value.
    """
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def prepare(config: CoordinatorConfig) -> tuple[ClusterState, Plan]:
    """Check ``config`` and compute the run's plan and initial state.

    No I/O but reading ``file:`` specs and checking that each output path can be written
    (:mod:`gossip.files.destinations`: nothing is created or left behind).

    Raises
    ------
    ConfigError
        Any bad setting, naming it and what would be valid.
    """
    check_positive("--rate", config.rate)
    check_positive("--until", config.until)
    if config.dead_after is not None:
        check_positive("--dead-after", config.dead_after)
    if config.broker_deadline is not None:
        check_positive("--broker-deadline", config.broker_deadline)
    check_positive("--metrics-period", config.metrics_period)
    check_positive("--register-timeout", config.register_timeout)
    check_positive("broker_wait", config.broker_wait)
    if config.dim < 1:
        raise ConfigError(f"--dim must be >= 1, got {config.dim}")
    if config.training_runs != 0 and config.training_runs < 3:
        raise ConfigError(f"training_runs must be 0 (no band) or >= 3, got {config.training_runs}")
    check_cluster(config.cluster, "--cluster")
    if config.broker:
        parse_broker(config.broker)
    if config.dashboard_port is not None and not 0 <= config.dashboard_port <= 65535:
        raise ConfigError(
            f"--dashboard-port must be 0..65535 (0: any free port), got {config.dashboard_port}"
        )
    if config.training is not None:
        if config.problem:
            raise ConfigError(
                f"--train {config.training.model!r} and --problem {config.problem!r} are two "
                "different runs; give one of them"
            )
        name = "arg"  # the training algorithm is the recipe's; the checks below are gossip's
    else:
        name = check_algorithm(config.algorithm, problem=bool(config.problem), live=True)
    # An optimization's parameters replace these below.
    algorithm = parse_algorithm(name if name in AVERAGING else "arg")
    topology = parse_topology(config.graph, weighted=config.weighted)
    if config.expect is not None and config.expect != topology.n:
        raise ConfigError(
            f"--expect {config.expect} does not match {config.graph}, which has {topology.n} "
            f"nodes; use --expect {topology.n} or another graph"
        )
    quantities = graph_quantities(topology)
    params = gossip_params(algorithm, quantities.mu_gossip, quantities.r_max)
    values = None
    dim = config.dim
    task = None
    training = None
    if config.until_accuracy is not None:
        if config.training is None:
            raise ConfigError(
                f"--until-accuracy {config.until_accuracy:g} needs --train, e.g. --train mlp:64"
            )
        if not 0.0 < config.until_accuracy <= 1.0:
            raise ConfigError(
                f"--until-accuracy must be in (0, 1], got {config.until_accuracy!r} (0.9: 90%)"
            )
    if config.problem:
        task = prepare_task(config.problem, config.data, config.split, topology, quantities)
        # The dual pair mixes and jumps like ARG's pair, with the dual parameters; both start
        # at 0 (the paper's Section 7), whatever the node's data.
        params = GossipParams(Algorithm.ARG, eta=task.eta, c=task.c, theta=task.theta)
        dim = task.dim
        values = np.zeros((topology.n, dim), dtype=np.float64)
    elif config.training is not None:
        recipe = config.training
        problem = recipe.problem(config.graph)
        eta, c = recipe.exchange_constants(problem)
        # theta 0: no guaranteed rate is claimed for training (the dashboard's bound is flat).
        params = GossipParams(Algorithm.ARG, eta=eta, c=c, theta=0.0)
        # The size from node 0's model alone: n of a model too large would take n times the
        # memory before the refusal.
        dim = int(recipe.initial(problem, nodes=1).shape[1])
        limit = min(LIVE_MAX_DIM, MAX_RAW_DIM)
        if dim > limit:
            # Each node draws its own model (the Bootstrap names it), but a state report
            # carries it in one MQTT packet (and an exchange, as a raw part the nodes bound):
            # such a model's nodes could not report, or exchange.
            raise ConfigError(
                f"--train {recipe.model} on {recipe.data} has {dim:,} parameters; a live run "
                f"takes models of at most {limit:,} (a node's state report carries its "
                "parameters in one MQTT packet of at most 256 MiB): take narrower layers, or "
                "simulate it with `gossip train`"
            )
        values = recipe.initial(problem)
        training = TrainTracker(recipe, problem, config.until_accuracy)
    elif config.data or config.split:
        raise ConfigError(
            f"--data {config.data!r} / --split {config.split!r} need --problem, e.g. "
            "--problem logistic:0.01"
        )
    elif config.values:
        from continuized.gossip.model.values import initial_values

        raw = initial_values(config.values, topology.n, dim=config.dim)
        values = np.asarray(raw, dtype=np.float64).reshape(topology.n, config.dim)
    # The outputs after the other settings: each check tries its directory on the disk.
    for option, path in (("--metrics-file", config.metrics_file), ("--json", config.json_path)):
        if path is not None:
            check_file_destination(option, path)
    if config.dashboard_port is not None and config.dashboard_runs_dir is not None:
        check_dir_destination("--dashboard-runs-dir", config.dashboard_runs_dir)
    security = None
    if config.keys is not None:
        from continuized.coordinator.membership.security import load_security

        security = load_security(config.keys)
    # A training node's report carries its parameters (d floats, several times): one every
    # couple of seconds at most keeps the broker's and the coordinator's load bounded.
    metrics_period = (
        config.metrics_period
        if training is None
        else report_period(topology.n, dim, max(config.metrics_period, TRAINING_REPORT_PERIOD))
    )
    plan = Plan(
        topology=topology,
        params=params,
        cluster=config.cluster,
        rate=config.rate,
        broker=config.broker,
        metrics_period=metrics_period,
        values=values,
        dim=dim,
        # Between the bootstrap and t = 0 each node builds its node, warms up and connects to
        # the broker; an older node (not ready-before-registering) also cuts its shard and
        # builds its problem or model then.
        start_delay=max(
            config.start_delay if task is None and config.training is None else 3.0,
            config.start_delay,
            START_PER_NODE * topology.n,
        ),
        task=task,
        training=config.training,
    )
    if security is not None:
        plan = secured(plan, security)
    state = ClusterState(
        graph=config.graph,
        cluster=config.cluster,
        expected=topology.n,
        eps=config.until,
        rate=config.rate,
        topology=topology,
        quantities=quantities,
        params=params,
        alive_timeout=max(3.0, 10 * metrics_period),
        optimization=None if task is None else OptTracker(task),
        training=training,
    )
    state.broker.url = redact_broker(config.broker)
    return state, plan


def secured(plan: Plan, security: Security) -> Plan:
    """``plan`` with CurveZMQ and MQTT credentials; its start also waits for the handshakes
    (:func:`coordinator.membership.handshakes.handshake_wait`, once the registrations say which
    edges join two processes)."""
    return dataclasses.replace(plan, security=security)
