"""Support shared by the test suite (``tests/``) and the benchmarks (``bench/``): the one
home of test support (``tests/`` holds tests, ``conftest.py`` files and fixture plugins
only; ``tests/repo/test_test_support.py`` keeps it so), so ``bench/`` never imports
``tests/`` and no test module imports another.

* :mod:`~tieredstore.testing.settings`: the cluster and broker names a test store goes
  by, command-line location flags and small-segment settings for a sidecar under test;
* :mod:`~tieredstore.testing.sidecar`: ``tieredstore run`` as a real subprocess (crash,
  lease and signal tests), the SIGKILL crash cycles, waiting for a line it logs;
* :mod:`~tieredstore.testing.pausing_sidecar`: ``tieredstore`` as a real process that
  SIGSTOPs itself at a chosen cold-store call (``python -m``);
* :mod:`~tieredstore.testing.stall`: a backend wrapper that holds calls until released;
* :mod:`~tieredstore.testing.lease_time`: virtual time that keeps the lease renewed;
* :mod:`~tieredstore.testing.oracle`: the test oracle, the plain segment builder the
  sidecar's segments are compared with;
* :mod:`~tieredstore.testing.segments`: hot records and cold segments built by hand;
* :mod:`~tieredstore.testing.coldimage`: a synthetic hot store tiered with the real
  segment codec (without a sidecar), written to a directory or any fsspec URL;
* :mod:`~tieredstore.testing.coldcheck`: a cold prefix read back, fully verified, and
  compared with the hot store record by record;
* :mod:`~tieredstore.testing.divergence`, :mod:`~tieredstore.testing.retention`,
  :mod:`~tieredstore.testing.lost_head`: the stores the repair, retention and resume
  tests start from (a diverged tail, messages that expire, an untiered head lost);
* :mod:`~tieredstore.testing.strategies`: Hypothesis strategies for broker records;
* :mod:`~tieredstore.testing.broker_index`: the broker's key index read as it reads it;
* :mod:`~tieredstore.testing.pagecache`: what of a file is still dirty in the page cache;
* :mod:`~tieredstore.testing.report_doc`: a verification report's JSON read back;
* :mod:`~tieredstore.testing.browser`: headless Chromium measuring a page's layout;
* :mod:`~tieredstore.testing.moto`: the moto S3 server on loopback and its dummy
  credentials;
* :mod:`~tieredstore.testing.rocketmq`: a real RocketMQ name server and broker on
  loopback, driven by the stock Java client (``tests/broker/java/BrokerTool.java``);
* :mod:`~tieredstore.testing.broker_plugin`: the broker read plugin (``broker-plugin/``)
  built with Maven, cached by a hash of its sources;
* :mod:`~tieredstore.testing.broker`: the real-broker harness (traffic, conformance
  checks, scenarios, the golden store's generator, the power cut);
* :mod:`~tieredstore.testing.fleet`: a synthetic fleet of brokers;
  :mod:`~tieredstore.testing.sparkcluster`: a Spark standalone cluster.

Part of the core layer (it imports the core only) and never imported by the sidecar,
the verifier or the CLI themselves. What needs a layer above the core (the CLI's
runtime, the dispatcher, the verifier) is a fixture in ``tests/`` instead.
"""
