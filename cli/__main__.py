"""``python -m continuized.cli``: the ``gossip`` command line, when its script is not on PATH."""

from continuized.cli.app import main

main()
