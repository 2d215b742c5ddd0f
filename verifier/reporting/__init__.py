"""What a verification run publishes: report.json and anomalies.parquet (:mod:`.report`),
report.html (:mod:`.html`), history.html (:mod:`.history`), verify.prom (:mod:`.metrics_file`)."""
