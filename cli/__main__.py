"""``python -m tieredstore.cli ...``: the ``tieredstore`` command."""

from tieredstore.cli.main import entry

if __name__ == "__main__":
    entry()
