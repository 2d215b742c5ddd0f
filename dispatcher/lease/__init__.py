"""The single writer: the lease object (:mod:`.lease`), its renewal loop (:mod:`.renewal`),
holding it across a destructive job (:mod:`.guard`), and the operator's side (:mod:`.admin`)."""
