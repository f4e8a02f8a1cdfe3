"""The Prometheus scrape config and the Grafana dashboard match what /metrics really serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from continuized.coordinator.dashboard.prometheus import make_registry
from continuized.coordinator.dashboard.synthetic import SyntheticCluster

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _served_names() -> set[str]:
    cluster = SyntheticCluster("grid:3x3", "arg", rate=100.0)
    state = cluster.new_state()
    cluster.feed(state)
    # The exact curve has begun (the drift gauge is exact, so it is left out before that).
    state.exact.append(state.history[-1])
    text = generate_latest(make_registry(state, lambda: (95.0, 1, 10))).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_grafana_queries_only_name_metrics_that_exist() -> None:
    dashboard = json.loads((DEPLOY / "grafana/dashboards/gossip.json").read_text())
    served = _served_names()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    for expr in exprs:
        # Label matchers {...} and ranges [...] hold no metric names.
        bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
        names = {w for w in re.findall(r"[a-z_][a-z0-9_]*", bare) if w.startswith("gossip_")}
        assert names, expr
        assert names <= served, f"{expr}: {names - served} not served"
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    provisioned = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/gossip-prometheus.yml").read_text()
    )
    assert uids == {provisioned["datasources"][0]["uid"]}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_prometheus_scrapes_the_coordinators_metrics_path() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["coordinator:8080"]
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/gossip.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
