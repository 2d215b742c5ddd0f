"""The real-broker test harness: a real RocketMQ broker and its read plugin, traffic for
it, the conformance checks run on its store, the live sidecar beside it, the scenarios the
broker tests and the golden store share (see :mod:`tests.support` for the rules of
this package).

* :mod:`~tests.support.broker.rocketmq`: a real RocketMQ name server and broker on
  loopback, driven by the stock Java client (``tests/broker/java/BrokerTool.java``);
* :mod:`~tests.support.broker.plugin`: the broker read plugin (``broker-plugin/``)
  built with Maven, cached by a hash of its sources;
* :mod:`~tests.support.broker.key_index`: the broker's key index (``index/``) read
  back as the broker reads it (what a restored index must answer);
* :mod:`~tests.support.broker.traffic`: the planned messages, their kinds, and the
  plan and result files the Java client (``BrokerTool``) reads and writes;
* :mod:`~tests.support.broker.manifest`: what was produced, as stored beside a
  store (the golden store's manifest);
* :mod:`~tests.support.broker.conformance`: the checks of a broker's store against
  what was produced, and :mod:`~tests.support.broker.suite`, every check one test;
* :mod:`~tests.support.broker.sidecar`: a live ``tieredstore run`` beside a broker;
* :mod:`~tests.support.broker.scenario`: the live conformance scenario;
* :mod:`~tests.support.broker.make_golden`: regenerates the golden store
  (``python -m tests.support.broker.make_golden``);
* :mod:`~tests.support.broker.restore_scenario`: the disaster-recovery scenario;
* :mod:`~tests.support.broker.serving`: the read plugin tests' traffic and what
  the stock consumers received;
* :mod:`~tests.support.broker.powercut`: the power-cut test's view of what a store
  keeps after a cut.
"""
