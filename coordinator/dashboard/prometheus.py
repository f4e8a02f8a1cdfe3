"""Prometheus exposition of the cluster state (``GET /metrics``).

The metrics are read from :class:`ClusterState` at scrape time by a custom collector, instead
of being kept in prometheus-client gauges updated on every report: the state already holds the
numbers, and copying 225 nodes' counters into gauges 10 times a second would cost more than the
dashboard itself. Each server gets its own ``CollectorRegistry``, so two coordinators in one
process (as in the tests) do not collide.

Metric families (all prefixed ``gossip_``). They follow Prometheus's naming conventions, as
``promtool check metrics`` checks them (tests/coordinator/dashboard/test_prometheus_lint.py): a
counter's samples end in ``_total``; a quantile is a summary's ``quantile`` label; a physical
unit is its base unit, named last (``_seconds``). t is the process's continuized time (the
expected number of activations so far), not a physical unit: figures in t carry no unit suffix.
``rate_*`` are activations per second of wall time, gauges because one is a setting and the
other the dashboard's own measure (``rate(gossip_activations_total[30s])`` is Prometheus's).
``mass_drift_rel`` claims no ``_ratio``: an optimization run's is the absolute drift of its
dual sums (:mod:`coordinator.figures.opt_measure`).

========================================  ========  ==========================================
name                                      type      meaning
========================================  ========  ==========================================
info{cluster,graph,algorithm,run_id}      info      what is running
phase{phase}                              stateset  registering / running / stopping / done /
                                                    failed
t                                         gauge     common continuized time of the last error
                                                    point (training: of the last scored point)
error                                     gauge     sum_v 1/2 |x_v(t) - mean|^2
mass_drift_rel                            gauge     relative drift of sum_v x_v, exact (absent
                                                    while unknown: views.exact_drift)
reached                                   gauge     1 once the error went below eps
t_eps                                     gauge     the exact curve's first t below eps (absent
                                                    before)
eps, theta                                gauge     target error; guaranteed rate (per unit of t)
accuracy, loss, consensus                 gauge     a training run's, in place of error,
                                                    mass_drift_rel, reached, t_eps, eps and
                                                    theta (gradient steps move the sum)
accuracy_target, t_accuracy               gauge     --until-accuracy and the t it was reached
nodes_expected, nodes_alive               gauge     node counts
activations_total                         counter   edge activations completed, network-wide
rate_asked, rate_achieved                 gauge     activations per second
broker_connected                          gauge     1 if the coordinator's MQTT link is up
broker_reconnects_total                   counter   times that link was re-established
node_value{node,name}                     gauge     x (|x| for vectors)
node_t{node,name}                         gauge     the node's t at its last report
node_report_age_seconds{node,name}        gauge     seconds since its last report
node_alive{node,name}                     gauge     1 if it reported recently and has not
                                                    stopped
node_reports_total{node,name}             counter   reports received
node_exchanges_total{node,name,kind}      counter   initiated, served, retried, failed,
                                                    rejected, duplicates, ...
node_rtt_seconds{node,name,quantile}      summary   exchange round trip, p50 and p99
node_jump_lag{node,name,quantile}         summary   lag of the jumps behind their ticks, in t,
                                                    p50 and p99
dashboard_clients                         gauge     open live streams
dashboard_batches_total                   counter   batches sent to the live streams
========================================  ========  ==========================================

The two summaries hold quantiles only, without ``_count`` and ``_sum``: a node reports the
percentiles of its recent exchanges, not how many there were nor their total, and the text
format lets a summary leave both out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector

from continuized.coordinator.dashboard.views import display_value, exact_drift
from continuized.coordinator.figures.records import COUNTER_NAMES
from continuized.coordinator.figures.state import PHASES, ClusterState

__all__ = ["ClusterCollector", "QuantileSummary", "make_registry"]


class ClusterCollector(Collector):
    """Collect the cluster and per-node metrics from ``state`` at each scrape.

    Parameters
    ----------
    state : ClusterState
        Read only.
    extra : callable, optional
        Returns ``(rate_achieved, clients, batches)`` from the dashboard's feed.
    """

    def __init__(
        self,
        state: ClusterState,
        extra: Callable[[], tuple[float | None, int, int]] | None = None,
    ) -> None:
        self.state = state
        self.extra = extra

    def collect(self) -> Iterator[Metric]:
        """Yield every metric family, as of now."""
        state = self.state
        now = time.time()
        yield InfoMetricFamily(
            "gossip",
            "What the cluster is running.",
            value={
                "cluster": state.cluster,
                "graph": state.graph,
                "algorithm": state.algorithm,
                "run_id": state.run_id,
            },
        )
        yield StateSetMetricFamily(
            "gossip_phase",
            "Phase of the coordinator.",
            value={phase: phase == state.phase for phase in PHASES},
        )
        if state.training is not None:
            yield from self._training(state)
        else:
            yield from self._averaging(state)
        yield _gauge("gossip_nodes_expected", "Nodes the coordinator expects.", state.expected)
        yield _gauge(
            "gossip_nodes_alive",
            "Nodes that reported recently and have not stopped.",
            state.nodes_alive(now),
        )
        activations = CounterMetricFamily(
            "gossip_activations_total", "Edge activations completed, network-wide."
        )
        activations.add_metric([], float(state.activations()))
        yield activations
        yield _gauge("gossip_rate_asked", "Asked activations per second.", state.rate)
        rate_achieved, clients, batches = self.extra() if self.extra else (None, 0, 0)
        yield _gauge(
            "gossip_rate_achieved",
            "Activations per second achieved over the last few seconds.",
            rate_achieved,
        )
        yield _gauge(
            "gossip_broker_connected",
            "1 if the coordinator is connected to the MQTT broker.",
            float(state.broker.connected),
        )
        reconnects = CounterMetricFamily(
            "gossip_broker_reconnects_total", "Times the MQTT connection was re-established."
        )
        reconnects.add_metric([], float(state.broker.reconnects))
        yield reconnects
        yield from self._nodes(state, now)
        yield _gauge("gossip_dashboard_clients", "Open live streams.", clients)
        sent = CounterMetricFamily(
            "gossip_dashboard_batches_total", "Batches sent to live streams."
        )
        sent.add_metric([], float(batches))
        yield sent

    @staticmethod
    def _averaging(state: ClusterState) -> Iterator[Metric]:
        """The error, the mass drift and the eps rule: a gossip or an optimization run's."""
        yield _gauge("gossip_t", "Common continuized time of the last error point.", state.t)
        yield _gauge("gossip_error", "Error sum_v 1/2 |x_v(t) - mean|^2 at gossip_t.", state.error)
        # The exact drift: the running estimate's moves with the exchanges in flight, and an
        # alert on it would fire for healthy runs.
        yield _gauge(
            "gossip_mass_drift_rel",
            "Relative drift of the sum of x, exact (exact curve, then final reports).",
            exact_drift(state)[0],
        )
        yield _gauge("gossip_reached", "1 once the error went below eps.", float(state.reached))
        yield _gauge(
            "gossip_t_eps", "t at which the exact error first went below eps.", state.t_eps
        )
        yield _gauge("gossip_eps", "Target error.", state.eps)
        theta = state.params.theta if state.params is not None else None
        yield _gauge("gossip_theta", "Guaranteed rate of the algorithm, per unit of t.", theta)

    @staticmethod
    def _training(state: ClusterState) -> Iterator[Metric]:
        """The average model's scores: gradient steps move the sum, so a training run has no
        averaging error, mass drift or eps."""
        training = state.training
        assert training is not None
        last = training.latest

        def known(value: float | None) -> float | None:
            return None if value is None or math.isnan(value) else value

        t, accuracy, loss, consensus = (
            (None, None, None, None)
            if last is None
            else (last.t, known(last.accuracy), known(last.loss), known(last.consensus))
        )
        yield _gauge("gossip_t", "t of the last scored point (gradient steps per node).", t)
        yield _gauge("gossip_accuracy", "Test accuracy of the average model at gossip_t.", accuracy)
        yield _gauge("gossip_loss", "Training loss of the average model at gossip_t.", loss)
        yield _gauge(
            "gossip_consensus",
            "Consensus distance of the models at gossip_t (mean squared distance to the average).",
            consensus,
        )
        yield _gauge("gossip_accuracy_target", "The --until-accuracy target.", training.target)
        yield _gauge(
            "gossip_t_accuracy",
            "t at which the accuracy first reached its target.",
            training.t_target,
        )

    @staticmethod
    def _nodes(state: ClusterState, now: float) -> Iterator[Metric]:
        labels = ["node", "name"]
        value = GaugeMetricFamily(
            "gossip_node_value", "x of the node (|x| if a vector).", labels=labels
        )
        node_t = GaugeMetricFamily(
            "gossip_node_t", "The node's t at its last report.", labels=labels
        )
        age = GaugeMetricFamily(
            "gossip_node_report_age_seconds", "Seconds since the node's last report.", labels=labels
        )
        alive = GaugeMetricFamily(
            "gossip_node_alive",
            "1 if the node reported recently and has not stopped.",
            labels=labels,
        )
        reports = CounterMetricFamily(
            "gossip_node_reports_total", "Reports received.", labels=labels
        )
        exchanges = CounterMetricFamily(
            "gossip_node_exchanges_total",
            "Exchange counters of the node.",
            labels=[*labels, "kind"],
        )
        rtt = QuantileSummary(
            "gossip_node_rtt_seconds", "Round-trip time of the node's exchanges.", labels
        )
        lag = QuantileSummary(
            "gossip_node_jump_lag",
            "Lag of the node's jumps behind their ticks, in units of t "
            "(continuized.gossip.exchange.lateness).",
            labels,
        )
        for node_id in sorted(state.nodes):
            view = state.nodes[node_id]
            key = [str(node_id), view.name]
            x = display_value(view.x)
            if x is not None:
                value.add_metric(key, x)
            if math.isfinite(view.t):
                node_t.add_metric(key, view.t)
            if view.reports:
                age.add_metric(key, max(0.0, now - view.received))
            alive.add_metric(key, float(view.alive(now, state.alive_timeout)))
            reports.add_metric(key, float(view.reports))
            for kind in COUNTER_NAMES:
                exchanges.add_metric([*key, kind], float(view.counters.get(kind, 0)))
            rtt.add_quantiles(
                key, {"0.5": _seconds(view.rtt_p50_ms), "0.99": _seconds(view.rtt_p99_ms)}
            )
            lag.add_quantiles(key, {"0.5": view.lag_p50, "0.99": view.lag_p99})
        yield from (value, node_t, age, alive, reports, exchanges, rtt, lag)


class QuantileSummary(Metric):
    """A summary family of quantiles only, one set per label set.

    prometheus-client's ``SummaryMetricFamily`` takes a count and a sum but no quantiles;
    the nodes report percentiles and neither of those.

    Parameters
    ----------
    name : str
        The family's name, with its unit (the samples carry it unchanged).
    documentation : str
        Help text.
    labels : list of str
        Label names, ``quantile`` excluded (it is added to each sample).
    """

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        super().__init__(name, documentation, "summary")
        self._labelnames = tuple(labels)

    def add_quantiles(self, values: list[str], quantiles: dict[str, float | None]) -> None:
        """Add a sample per known quantile (``{"0.5": p50, ...}``); unknown ones are left out."""
        labels = dict(zip(self._labelnames, values, strict=True))
        for quantile, value in quantiles.items():
            if value is not None and math.isfinite(value):
                self.add_sample(self.name, {**labels, "quantile": quantile}, value)


def make_registry(
    state: ClusterState, extra: Callable[[], tuple[float | None, int, int]] | None = None
) -> CollectorRegistry:
    """Return a fresh registry holding only a :class:`ClusterCollector` for ``state``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(state, extra))
    return registry


def _seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None


def _gauge(name: str, doc: str, value: float | int | None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    # An unknown value is left out rather than exported as NaN: Grafana then shows a gap.
    if value is not None and math.isfinite(value):
        family.add_metric([], float(value))
    return family
