"""Support shared by the test suite (``tests/``) and the benchmarks (``bench/``): the one
home of test support (``tests/`` holds tests, ``conftest.py`` files and fixture plugins
only; ``tests/repo/test_test_support.py`` keeps it so), so ``bench/`` never imports
``tests/`` and no test module imports another.

* :mod:`~tests.support.stores`: stores built without a sidecar (hot records and
  cold segments by hand, the test oracle, a synthetic store tiered with the real codec, a
  cold prefix checked against hot, the stores the repair, retention and resume tests
  start from);
* :mod:`~tests.support.sidecar`: a sidecar under test (its names, flags and
  settings, ``tieredstore run`` as a real subprocess or one that SIGSTOPs itself, a
  backend that stalls, virtual time that keeps the lease);
* :mod:`~tests.support.broker`: the real broker (RocketMQ on loopback, the read
  plugin built with Maven, its key index read back) and the harness around it (traffic,
  conformance checks, scenarios, the golden store's generator, the power cut);
* :mod:`~tests.support.verification`: the verifier's tests' support (a synthetic
  fleet, a Spark standalone cluster, a report's JSON read back, headless Chromium);
* :mod:`~tests.support.moto`: the moto S3 server on loopback and its dummy
  credentials;
* :mod:`~tests.support.strategies`: Hypothesis strategies for broker records;
* :mod:`~tests.support.pagecache`: what of a file is still dirty in the page cache;
* :mod:`~tests.support.cache`: what the first run builds and later runs reuse (jars, the
  plugin, the class archive), and its one lock;
* :mod:`~tests.support.spark_archive`: the class-data sharing archive the suite's Spark
  JVMs start from.

Part of the core layer (it imports the core only) and never imported by the sidecar,
the verifier or the CLI themselves. What needs a layer above the core (the CLI's
runtime, the dispatcher, the verifier) is a fixture in ``tests/`` instead.
"""
