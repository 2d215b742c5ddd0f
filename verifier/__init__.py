"""The Spark verifier: proves the cold store covers the hot store exactly.

The job graph is described in :mod:`verifier.job`'s docstring.

Entry points: ``python -m verifier``, ``spark-submit verifier/__main__.py`` and
``tieredstore verify`` (same flags, :mod:`verifier.cli`). Modules:

* :mod:`verifier.job` — the job: read, check, collect, decide (:func:`~verifier.job.verify`);
* :mod:`verifier.cli` — the flags, the run and its exit code;
* :mod:`verifier.spark.session` — the SparkSession (local and quiet, or spark-submit's);
* :mod:`verifier.vocabulary` — anomaly classes, levels, lag allowance, options;
* :mod:`verifier.verdict` — the verdicts: ordering, exit codes, colours (defined once);
* :mod:`verifier.outcome` — the outcome of a run: anomalies, per-queue reports, totals;
* :mod:`verifier.schemas` — Spark schemas of every frame;
* :mod:`verifier.readers` — driver listing and the Spark tasks that read;
* :mod:`verifier.segmentcheck` — per-segment numpy checks (no I/O);
* :mod:`verifier.checks` — pure DataFrame → DataFrame anomaly checks;
* :mod:`verifier.reporting.report` — report.json, anomalies.parquet, report.html;
* :mod:`verifier.fleet.take` — taking a hot fingerprint (``tieredstore fingerprint``;
  the format is :mod:`tieredstore.cold.fingerprint`);
* :mod:`verifier.fleet.job` — the fleet job (``verify --fleet``), with
  :mod:`verifier.fleet.check` (one queue against a fingerprint),
  :mod:`verifier.fleet.report` (fleet.html, fleet.json, verify.prom) and
  :mod:`verifier.fleet.cli` (its flags).
"""
