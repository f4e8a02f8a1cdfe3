"""The model: what one node holds and how it moves, in closed form (pure: no clock, no I/O).

* :mod:`gossip.model.mixing` -- the mixing ODE between jumps, integrated exactly;
* :mod:`gossip.model.jumps` -- the RG and ARG jumps as antisymmetric flows;
* :mod:`gossip.model.ledger` -- a node's state as its initial value plus a flow per edge;
* :mod:`gossip.model.parameters` -- the same ledger on arrays, for a model's parameters, with
  its vector arithmetic from :mod:`gossip.model.arithmetic` (one API, two backends: NumPy
  blocks, or numba loops for large models) and its frames' arrays from
  :mod:`gossip.model._arraypool`;
* :mod:`gossip.model.algorithms` -- the algorithms (rg, arg) and their parameters
  (eta, c, theta) from the graph's quantities;
* :mod:`gossip.model.values` -- initial values from a short spec (``onehot``,
  ``gaussian:SEED``, ``file:PATH``: the one part that may read a file).
"""
