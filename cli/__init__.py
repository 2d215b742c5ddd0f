"""The application layer: the ``tieredstore`` command, on top of every other layer.

* :mod:`tieredstore.cli.main` — the entry point: argparse, signals, exit codes;
* :mod:`tieredstore.cli.commands` — one module per subcommand;
* :mod:`tieredstore.cli.sidecar` — the running sidecar's process edge: the wiring from
  settings to a running dispatcher, the HTTP APIs, reload on SIGHUP, the progress and
  summary lines.

Only this package may import from every layer (``[tool.importlinter]`` in
pyproject.toml); nothing below imports it.
"""
