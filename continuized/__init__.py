"""Continuized randomized gossip: the one name this project installs.

Its four parts are the repository's top-level folders, mapped in as subpackages (the folder
``continuized/`` holds links to them), so the layers read the same on disk and in an import:

- :mod:`continuized.cli`, the ``gossip`` command line, on top;
- :mod:`continuized.coordinator` and :mod:`continuized.node`, independent of each other;
- :mod:`continuized.gossip`, the pure core, at the bottom.

One distinctive name keeps a user's own ``cli/``, ``node.py`` or ``gossip.py`` from shadowing
the project's, and the project's from shadowing theirs.
"""
