"""Graphs: topology specs and the spectral quantities the algorithms need.

* :mod:`gossip.graph.topology` -- parse ``grid:15x15`` and friends (or ``file:PATH``, an edge
  list), check the graph, attach the edge probabilities;
* :mod:`gossip.graph.spectral` -- ``mu_gossip``, effective resistances, ``R_max`` and the
  guaranteed rates, exact or estimated on large graphs.
"""
