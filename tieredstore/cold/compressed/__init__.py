"""Compressed cold objects: the seekable zstd codec (:mod:`.frames`) and the one decoder
every reader of COMMIT_LOG bytes goes through (:mod:`.framed`)."""
