"""The coordinator: registration and bootstrap of the nodes, metrics, and the local launcher.

Modules
-------
state, records
    :class:`~coordinator.state.ClusterState`, the in-process view the dashboard serves (C4),
    and the records it holds (node views, error points, final result, run summaries).
registry, registrar
    Registration as a sans-IO state machine, and the ZeroMQ ROUTER that drives it (C2).
metrics, agreement
    The error and mass drift from node reports (consistent cut, mixed to a common t), and the
    comparison of a run's error curve with the simulator's band.
mqtt_link, runlog
    The coordinator's MQTT connection (C3) and its metrics / summary files.
evaluation, outcome, status
    The error point from the latest reports, the exact outcome of a stopped run, and the
    retained status message (with when a run can be resumed).
config, service
    The settings (checked) and :class:`~coordinator.service.Coordinator`: ``gossip coordinator``.
broker, procs, launcher
    The embedded broker, child processes that never outlive their parent, and ``gossip up``.
"""

__all__: list[str] = []
