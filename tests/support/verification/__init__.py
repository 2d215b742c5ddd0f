"""Support for the verifier's tests and bench: a synthetic fleet of brokers (:mod:`.fleet`),
a Spark standalone cluster (:mod:`.sparkcluster`), a verification report's JSON read back
(:mod:`.report_doc`) and headless Chromium measuring a report's layout (:mod:`.browser`)."""
