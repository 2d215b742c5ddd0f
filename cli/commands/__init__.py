"""One module per ``tieredstore`` subcommand (see :mod:`tieredstore.cli`)."""
