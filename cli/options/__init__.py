"""The options of the ``gossip`` commands, each group declared once as Typer annotations.

A command names its parameters itself (Typer reads them from its signature) but takes their
declarations from here, so that an option that two commands share has one name, one
environment variable, one help text and one check. Every option is read from
``GOSSIP_<NAME>`` when not given.

envvars
    :func:`~cli.options.envvars.option` and :func:`~cli.options.envvars.env`: how an option and
    its environment variable are declared.
batch_runs
    ``--runs``, ``--grid-points``, ``--seed``, ``--eps``, ``--workers`` of the batch commands,
    and the checks of their values (``check_count``, ``check_positive``).
output
    ``--plot``, ``--csv``, ``--json``, ``--progress`` and the ``reproduce`` commands' ``--out``.
objective
    What a run computes (``--values``, ``--dim``, ``--problem``, ``--data``, ``--split``), and
    :func:`~cli.options.objective.live_objective`, the rule for their defaults in a live run.
training
    A live run's ``--train`` options and their recipe; the simulated ``train``'s local step.
panels
    The ``--help`` panel titles every option is declared under.
cluster
    The rest of a live run's options (``coordinator``, ``up``): topology, rate, target, metrics,
    time limits, the dashboard, and the rule that ``--hold`` needs a dashboard.
"""

from __future__ import annotations

__all__: list[str] = []
