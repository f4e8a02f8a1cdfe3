"""The wire format: the only place frames are built and parsed (pure).

* :mod:`gossip.wire.schema` -- every message as a frozen dataclass, with its encoding and
  its validation (registration, bootstrap, exchange, recovery, parting, membership);
* :mod:`gossip.wire.checks` -- the field checkers and the limits they enforce;
* :mod:`gossip.wire.hot` -- the exchange's own three messages, encoded and checked on the
  hot path without the schema's generic machinery (same bytes, same checks).
* :mod:`gossip.wire.packed` -- a model's parameters inside a JSON document (a training
  node's state report), as base64 of their float64 bytes.
"""
