"""One run of the coordinator: its settings, its loop, and what it decides.

config
    The settings, checked before anything starts
    (:class:`~coordinator.run.config.CoordinatorConfig`).
service, companions
    :class:`~coordinator.run.service.Coordinator`, ``gossip coordinator``: bootstrap, then
    listen; and what runs beside it (the dashboard, a training run's simulated band).
enrollment, roster, standing
    Who is in the run (registrations, leaves, deaths, joins) and the retained messages that let
    a restarted coordinator take the run back.
evaluation, convergence, outcome, finals, status
    The error point from the latest reports, the rule that says eps is reached, the exact
    outcome of a stopped run, the nodes' final reports, and the retained status message.
runlog, _groups
    The run's metrics and summary files, and the one error a task group's failure comes to.
"""
