"""``python -m tieredstore.verifier ...`` and ``spark-submit verifier/__main__.py ...`` (same
flags).

Run as a script (spark-submit), Python puts this file's directory first on ``sys.path``;
that directory's modules would then shadow top-level names, and the package itself would
not be importable from a checkout. So the script case swaps it for the directory above.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
    sys.path.insert(0, str(Path(_here).parent))

from tieredstore.verifier.cli import main

if __name__ == "__main__":
    sys.exit(main())
