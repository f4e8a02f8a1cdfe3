"""The ``gossip`` command line: one entry point, one module per group of subcommands.

Each command module registers its commands on the Typer apps of :mod:`cli._app` and keeps
its heavy imports (matplotlib, zmq, aiohttp) inside the command functions, so that
``gossip --help`` stays fast.
"""
