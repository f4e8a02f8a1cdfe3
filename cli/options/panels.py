"""The panels of ``--help``: every option is declared with one of these, the same in every command.

A command's ``--help`` groups its options under these titles, in the order the command first
uses them; an option shared by several commands sits under the same title in each.
"""

from __future__ import annotations

__all__ = [
    "DASHBOARD",
    "DEPLOYMENT",
    "DEPRECATED",
    "KEYS",
    "MEMBERSHIP",
    "OBJECTIVE",
    "OUTPUT",
    "PROCESSES",
    "RUN",
    "SECURITY",
    "TRAINING",
]

RUN = "Run"
"""How the run goes: graph, algorithm, rate, target, time limits, runs, seeds."""
OBJECTIVE = "Objective"
"""What the run computes: initial values, or a problem and its data."""
TRAINING = "Training"
"""The model and the local step of a training run."""
OUTPUT = "Output"
"""What is written where: summaries, curves, figures, metrics, logs, progress."""
DASHBOARD = "Dashboard"
"""The live dashboard: where it is served, who may read it, how long it stays."""
SECURITY = "Security"
"""Keys, certificates, and the insecure mode."""
DEPLOYMENT = "Deployment"
"""Where the parts are and how they reach each other: broker, addresses, cluster name."""
PROCESSES = "Processes"
"""The node processes: how many nodes each hosts, how they start and restart."""
MEMBERSHIP = "Membership"
"""Nodes joining and leaving a running cluster."""
KEYS = "Keys"
"""What ``gossip keys init`` writes."""
DEPRECATED = "Deprecated"
"""Options kept so that old command lines still parse; they do nothing."""
