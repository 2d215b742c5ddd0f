"""The archive view of the cold store: one Arrow row per message (:mod:`.rows`) and the
Parquet export (:mod:`.export`)."""
