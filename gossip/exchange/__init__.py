"""The exchange protocol between neighbours, as a sans-IO state machine: exact jumps by design.

:mod:`gossip.exchange.exchanger` holds the :class:`~gossip.exchange.exchanger.Exchanger` and
states the protocol's rules once ("Theory of operation"). The exchanger owns its parts, which
share one explicit :class:`~gossip.exchange.vocabulary.ExchangeState`:

* :mod:`gossip.exchange.initiating` -- the initiator: its lock, the activations it owes
  (:mod:`gossip.exchange.waiting`), its pending requests and their retries
  (:mod:`gossip.exchange.rto`);
* :mod:`gossip.exchange.answers` -- what the initiator does with a reply, a Busy or a Nack;
* :mod:`gossip.exchange.serving` -- the server: requests decided, deferred
  (:mod:`gossip.exchange.deferral`) or crossed (:mod:`gossip.exchange.crossing`);
* :mod:`gossip.exchange.recovery` and :mod:`gossip.exchange.parting` -- a restarted node
  rebuilding its ledger, a stopping node parting without losing half an exchange;
* :mod:`gossip.exchange.switching` -- going on in the next membership view, whose rules
  (views, the settlement at a view's start, the mean a view change promises) are stated once
  in :mod:`gossip.exchange.membership`;
* :mod:`gossip.exchange.vocabulary` -- the protocol's words: its transitions as data and the
  records it keeps (links, counters, the time base);
* measures: lateness of the jumps (:mod:`gossip.exchange.lateness`), recent samples
  (:mod:`gossip.exchange.recent`) and the exact trace of a node's values
  (:mod:`gossip.exchange.trace`).
"""
