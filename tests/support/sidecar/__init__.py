"""A sidecar under test: its names, location flags and settings (:mod:`.settings`), run as
a real subprocess (:mod:`.process`) or as one that SIGSTOPs itself at a chosen call
(:mod:`.pausing`), a backend that holds its calls (:mod:`.stall`), and virtual time that
keeps its lease (:mod:`.lease_time`)."""
