"""``python -m cli``: the ``gossip`` command line, for when the console script is not on PATH."""

from cli.app import main

main()
