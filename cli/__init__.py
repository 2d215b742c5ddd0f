"""The application layer: the ``tieredstore`` command, on top of every other layer.

* :mod:`tieredstore.cli.main` — the entry point: argparse, signals, exit codes;
* :mod:`tieredstore.cli.commands` — one module per subcommand;
* :mod:`tieredstore.cli.sidecar` — the running sidecar's process edge: the wiring from
  settings to a running dispatcher, the HTTP APIs, reload on SIGHUP, the progress and
  summary lines.

Only this package may import from every layer (``[tool.importlinter]`` in
pyproject.toml); nothing below imports it.
"""

import os

# The command never multiplies matrices, but numpy's OpenBLAS starts a thread per core
# when numpy is imported, and each spins about 0.1 CPU-second before it sleeps: CPU taken
# from the broker by every run (measured with perf: 5 % of a `run --once` of 256 MiB).
# Set here, before any command imports numpy; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
