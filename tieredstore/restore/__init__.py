"""Disaster recovery: a RocketMQ store rebuilt from one broker's cold prefix.

Modules, in the order a restore uses them: :mod:`.outdir` (claim the output directory),
:mod:`.plan` (which links, from the committed history), :mod:`.stream` (read them in checked
chunks), :mod:`.commitlog`, :mod:`.consumequeue` and :mod:`.index` (write the store's
files), :mod:`.journal` (commit points, resume), :mod:`.configs` (``config/``),
:mod:`.restorer` (the coordinator) and :mod:`.check` (``restore --check``). The runbook
is ``docs/restore.md``.
"""
