"""The cold store's objects and records: keys (:mod:`.layout`), segments, manifests,
digests, loss and provenance records, config copies; and reading them back (:mod:`.reader`,
:mod:`.serving`, :mod:`.readahead`)."""
