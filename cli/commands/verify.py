"""``tieredstore verify``: run the Spark verifier (the same flags as ``python -m
tieredstore.verifier``).

Exit codes: 0 CLEAN, 1 DIRTY, 2 CORRUPT, 3 could not run (one line on stderr), 4
INCOMPLETE (``--fleet`` only; verifier/verdict.py). Every failure is mapped here, so the
CLI's generic error handling never turns one into 1.
"""

from __future__ import annotations

import argparse

from tieredstore.verifier.cli import add_arguments as verifier_arguments
from tieredstore.verifier.cli import run as run_verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    verifier_arguments(p)


def run(args: argparse.Namespace) -> int:
    return run_verifier(args, prog="tieredstore verify")
