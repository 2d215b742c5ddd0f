"""Spark's Python daemon (``spark.python.daemon.module``), importing PySpark's bytecode.

Spark starts its Python workers from a daemon (``python -m pyspark.daemon``, one per
executor) with ``pyspark.zip`` first on ``PYTHONPATH``. A zip holds no bytecode, so the
daemon and every worker it forks compile each PySpark module they import from source,
again in each new JVM: about a second of CPU per fresh worker. With a pip-installed
PySpark that zip sits inside the installed package (``<site>/pyspark/python/lib/``), so
the package itself is the same code, with its ``__pycache__``.

This module moves that zip to the end of ``sys.path`` (an installed package then wins,
a zip that belongs to no installed copy still serves) and runs Spark's own daemon. It
imports nothing else before forking (no threads: see ``pyspark.daemon``).
:func:`tieredstore.verifier.spark.session.spark_session` selects it for the JVMs it starts itself.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["installed_copy_first"]


def installed_copy_first(path: list[str]) -> list[str]:
    """``path`` with each ``<dir>/pyspark/python/lib/pyspark.zip`` entry moved to the end when
    ``<dir>/pyspark/__init__.py`` exists (the zip is part of that installed copy)."""
    bundled = []
    for entry in path:
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))
        if (
            os.path.basename(entry) == "pyspark.zip"
            and lib.endswith(os.path.join("pyspark", "python", "lib"))
            and os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            bundled.append(entry)
    return [p for p in path if p not in bundled] + bundled


def main() -> None:
    """Run ``pyspark.daemon`` with the installed PySpark first on the path.

    The daemon and its workers ignore SIGINT: a Ctrl-C in the terminal reaches the whole
    process group, but stopping is the driver's job (it cancels the tasks and stops the
    JVM, which ends the daemon); PySpark's workers would otherwise each print a
    KeyboardInterrupt traceback.
    """
    sys.path[:] = installed_copy_first(sys.path)
    from pyspark import daemon

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # pyspark.daemon.worker() gives each forked worker ``signal.default_int_handler`` for
    # SIGINT; in this process (the daemon and its forks only) that name means "ignore".
    setattr(signal, "default_int_handler", signal.SIG_IGN)  # noqa: B010
    daemon.manager()


if __name__ == "__main__":
    main()
