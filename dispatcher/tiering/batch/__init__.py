"""Batch objects, the small queues' shared commit: one object per round (:mod:`.writer`),
the objects at batch keys (:mod:`.keys`: fences, withdrawals), rewriting slices as
segments (:mod:`.compaction`) and deleting batches they no longer need (:mod:`.collect`)."""
