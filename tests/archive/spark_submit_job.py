"""A PySpark job run by ``spark-submit`` in the tests: messages per broker in the archive.

Usage: ``spark-submit spark_submit_job.py COLD_URL CLUSTER OUT_JSON``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from tieredstore.verifier.archive import register


def main(cold: str, cluster: str, out: str) -> None:
    spark = SparkSession.builder.appName("tieredstore-archive-job").getOrCreate()
    try:
        register(spark)
        df = spark.read.format("tieredstore").option("cold", cold).option("cluster", cluster)
        counts = df.load().groupBy("broker").count().collect()
        Path(out).write_text(json.dumps({r["broker"]: r["count"] for r in counts}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
