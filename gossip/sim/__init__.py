"""The simulator's machinery: activation streams (:mod:`.events`) and the sweep (:mod:`.engine`).

The public API is :func:`gossip.sim.simulator.simulate`.
"""

__all__: list[str] = []
