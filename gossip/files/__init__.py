"""The core's files: key material on disk and the simulator's outputs.

The rest of the core touches no disk (an import-linter contract checks the pure packages);
what reads or writes files is here:

* :mod:`gossip.files.keys` -- CURVE identities, the allow-list and the MQTT secret of a
  secured cluster, written with private permissions and read back with checks;
* :mod:`gossip.files.outputs` -- the paper-style figure, the CSV of the curves and the JSON
  summary of a simulation.
* :mod:`gossip.files.destinations` -- every command's output paths, checked before any work
  without creating anything, and the fallback file that keeps a result whose write failed.
"""
