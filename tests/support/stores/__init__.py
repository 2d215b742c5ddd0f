"""Stores built without a sidecar: hot records and cold segments by hand (:mod:`.segments`,
:mod:`.batches`), the test oracle's plain segment builder (:mod:`.oracle`), a synthetic
hot store tiered with the real codec (:mod:`.coldimage`), a cold prefix checked against hot
(:mod:`.coldcheck`), and the stores the repair, retention and resume tests start from
(:mod:`.divergence`, :mod:`.retention`, :mod:`.lost_head`)."""
