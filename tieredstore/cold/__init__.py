"""The cold store's objects and records: keys (:mod:`.layout`), segments, manifests,
batch objects (:mod:`.batch`), digests, loss and provenance records, config copies, hot
fingerprints (:mod:`.fingerprint`); and
reading them back (:mod:`.reader`, :mod:`.serving`, :mod:`.readahead`); compressed objects
(:mod:`.compressed`)."""
