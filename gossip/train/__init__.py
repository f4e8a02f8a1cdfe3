"""Decentralized training, simulated exactly: A²CiD², AD-PSGD, local SGD and all-reduce.

Parts: :mod:`~gossip.train.constants` (the A²CiD² ``eta`` and ``alpha~`` of a graph),
:mod:`~gossip.train.models` (NumPy models with hand-written gradients),
:mod:`~gossip.train.trainset` (shards and the held-out test set),
:mod:`~gossip.train.clocks` (the event model and the seeded streams),
:mod:`~gossip.train.workers` (what each algorithm does at an event),
:mod:`~gossip.train.trainer` (the event-driven simulation) and
:mod:`~gossip.train.scores` (the metrics and the curves of many runs).
"""

from continuized.gossip.train.clocks import EventClock, node_stream
from continuized.gossip.train.constants import AcidConstants, acid_constants
from continuized.gossip.train.models import MODEL_KINDS, Model, Network, parse_model
from continuized.gossip.train.scores import METRICS, TrainingResult
from continuized.gossip.train.trainer import (
    TrainingProblem,
    initial_models,
    make_problem,
    node_initial,
    run_once,
    run_training,
)
from continuized.gossip.train.trainset import TrainSet, load_trainset
from continuized.gossip.train.workers import ALGORITHMS, Sgd, Workers

__all__ = [
    "ALGORITHMS",
    "METRICS",
    "MODEL_KINDS",
    "AcidConstants",
    "EventClock",
    "Model",
    "Network",
    "Sgd",
    "TrainSet",
    "TrainingProblem",
    "TrainingResult",
    "Workers",
    "acid_constants",
    "initial_models",
    "load_trainset",
    "make_problem",
    "node_initial",
    "node_stream",
    "parse_model",
    "run_once",
    "run_training",
]
