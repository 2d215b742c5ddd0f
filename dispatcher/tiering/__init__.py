"""One round of tiering: plan (:mod:`.planner`), make durable, gather in commitlog order,
upload, commit (:mod:`.committer`), adopt or quarantine; run by :mod:`.rounds`. The small
queues' batch objects and their compaction are in :mod:`.batch`."""
