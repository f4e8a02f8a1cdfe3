"""The wire format: the only place frames are built and parsed (pure).

* :mod:`gossip.wire.schema` -- every message as a frozen dataclass, with its encoding and
  its validation (registration, bootstrap, exchange, recovery, parting, membership);
* :mod:`gossip.wire.checks` -- the field checkers and the limits they enforce, and a model's
  parameters packed inside a JSON document (a training node's state report);
* :mod:`gossip.wire.hot` -- the exchange's own three messages, encoded and checked on the
  hot path without the schema's generic machinery (same bytes, same checks);
* :mod:`gossip.wire.pubsub` -- broker URLs and the MQTT topics' layout: the one place the
  nodes and the coordinator take them from;
* :mod:`gossip.wire.access` -- the security policy: the MQTT accounts, their passwords and
  the topics each may read and write (its adapters: the brokers' files and plugins);
* :mod:`gossip.wire.reconnect` -- how both sides stay connected to the broker: the jittered
  backoff and the reconnect loop, with the session, the sleep and the rng as arguments.
"""
