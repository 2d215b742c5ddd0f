"""Support shared by the test suite (``tests/``) and the benchmarks (``bench/``).

One home for what both need, so ``bench/`` never imports ``tests/``:

* :mod:`~tieredstore.testing.settings`: the cluster and broker names a test store goes
  by, command-line location flags and small-segment settings for a sidecar under test;
* :mod:`~tieredstore.testing.sidecar`: ``tieredstore run`` as a real subprocess (crash,
  lease and signal tests), and the SIGKILL crash cycles;
* :mod:`~tieredstore.testing.oracle`: the test oracle, the plain segment builder the
  sidecar's segments are compared with;
* :mod:`~tieredstore.testing.segments`: hot records and cold segments built by hand;
* :mod:`~tieredstore.testing.coldimage`: a synthetic hot store tiered with the real
  segment codec (without a sidecar), written to a directory or any fsspec URL;
* :mod:`~tieredstore.testing.moto`: the moto S3 server on loopback and its dummy
  credentials;
* :mod:`~tieredstore.testing.rocketmq`: a real RocketMQ name server and broker on
  loopback, driven by the stock Java client (``tests/broker/java/BrokerTool.java``);
* :mod:`~tieredstore.testing.broker_plugin`: the broker read plugin (``broker-plugin/``)
  built with Maven, cached by a hash of its sources.

Part of the core layer (it imports the core only) and never imported by the sidecar,
the verifier or the CLI themselves.
"""
