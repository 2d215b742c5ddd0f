"""The fleet job (``verify --fleet``): hot fingerprints (:mod:`.fingerprint`), one queue
against its broker's fingerprint (:mod:`.check`), the job (:mod:`.job`), its reports and flags."""
