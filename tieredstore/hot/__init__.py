"""The broker's store, read-only: its files (:mod:`.files`), the store (:mod:`.store`),
records gathered from the commitlog (:mod:`.commitlog`); a synthetic store (:mod:`.synth`)."""
