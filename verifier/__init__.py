"""The Spark verifier: proves the cold store covers the hot store exactly.

The job graph is described in :mod:`tieredstore.verifier.job`'s docstring.

Entry points: ``python -m tieredstore.verifier``, ``spark-submit verifier/__main__.py`` and
``tieredstore verify`` (same flags, :mod:`tieredstore.verifier.cli`). Modules:

* :mod:`tieredstore.verifier.job` — the job: read, check, collect, decide
  (:func:`~tieredstore.verifier.job.verify`);
* :mod:`tieredstore.verifier.cli` — the flags, the run and its exit code;
* :mod:`tieredstore.verifier.spark.session` — the SparkSession (local and quiet, or spark-submit's);
* :mod:`tieredstore.verifier.vocabulary` — anomaly classes, levels, lag allowance, options;
* :mod:`tieredstore.verifier.verdict` — the verdicts: ordering, exit codes, colours (defined once);
* :mod:`tieredstore.verifier.outcome` — the outcome of a run: anomalies, per-queue reports, totals;
* :mod:`tieredstore.verifier.schemas` — Spark schemas of every frame;
* :mod:`tieredstore.verifier.readers` — driver listing and the Spark tasks that read;
* :mod:`tieredstore.verifier.segmentcheck` — per-segment numpy checks (no I/O);
* :mod:`tieredstore.verifier.checks` — pure DataFrame → DataFrame anomaly checks;
* :mod:`tieredstore.verifier.reporting.report` — report.json, anomalies.parquet, report.html;
* :mod:`tieredstore.verifier.fleet.take` — taking a hot fingerprint (``tieredstore fingerprint``;
  the format is :mod:`tieredstore.cold.fingerprint`);
* :mod:`tieredstore.verifier.fleet.job` — the fleet job (``verify --fleet``), with
  :mod:`tieredstore.verifier.fleet.check` (one queue against a fingerprint),
  :mod:`tieredstore.verifier.fleet.report` (fleet.html, fleet.json, verify.prom) and
  :mod:`tieredstore.verifier.fleet.cli` (its flags).
"""
