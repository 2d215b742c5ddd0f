"""The running sidecar's process edge (used by ``run`` and the operator commands).

Wiring from settings to a running dispatcher (:mod:`~tieredstore.cli.sidecar.runtime`),
the operations and read HTTP APIs, reload on SIGHUP, the progress line and the periodic
summary line. The dispatcher never imports these.
"""
