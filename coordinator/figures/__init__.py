"""The run's figures, computed from the nodes' reports: pure, with no sockets and no files.

state, records
    :class:`~coordinator.figures.state.ClusterState`, the in-process view the dashboard serves,
    and the records it holds (node views, error points, final result, run summaries).
metrics, exact_curve, thinning
    The error and mass drift mixed to a common t, the exact curve from the nodes' traces, and
    how a long history is thinned.
agreement, lanrule
    The live curve judged among the simulator's runs, and the LAN rule's rate advice.
optimization, opt_measure, train_measure
    The figures of optimization and training runs.
"""
