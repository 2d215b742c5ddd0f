"""The ``tieredstore`` command: a thin sync edge over the async core.

Each subcommand lives in ``cli/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when
their command runs, so ``tieredstore --help`` stays fast and a broken optional
dependency only affects its own command.

Exit codes (every command): 0 success; 1 a runtime failure (one line on stderr);
3 bad usage or configuration (bad flag, bad config file, a cold store that does not
answer — :class:`~tieredstore.errors.ColdStoreUnreachableError`, one message for every
command — or refuses us: no or wrong credentials, a key without a right, a missing
bucket, another region — :class:`~tieredstore.errors.ColdStoreAccessError`, one message
too — a ``--store`` that is not a broker store, a state dir with no catalogue or one
of another cluster/broker). ``verify`` adds 1 DIRTY / 2 CORRUPT / 3 could not run /
4 INCOMPLETE (``--fleet``: a broker without a recent hot fingerprint).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import signal
import sys
import threading
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from types import FrameType
from typing import Any, Final, NoReturn, Protocol, cast

from tieredstore.errors import (
    CatalogueMismatchError,
    ColdStoreAccessError,
    ColdStoreUnreachableError,
    ConfigError,
    NotAStoreError,
    TieredStoreError,
)

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 3

#: name → (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("tieredstore.cli.commands.synth", "write a synthetic RocketMQ store"),
    "inspect": ("tieredstore.cli.commands.inspect", "list a hot store's queues and offsets"),
    "verify": (
        "tieredstore.cli.commands.verify",
        "prove the cold store covers the hot store (Spark)",
    ),
    "fingerprint": (
        "tieredstore.cli.commands.fingerprint",
        "fingerprint the hot store into the cold store (for verify --fleet)",
    ),
    "run": ("tieredstore.cli.commands.run", "run the sidecar (--once: one catch-up pass)"),
    "status": ("tieredstore.cli.commands.status", "per-queue hot/cold offsets, lag and state"),
    "read": ("tieredstore.cli.commands.read", "decode a queue's messages from the cold store"),
    "export": (
        "tieredstore.cli.commands.export",
        "export the cold store's messages as Parquet (incremental, idempotent)",
    ),
    "rebuild-metadata": (
        "tieredstore.cli.commands.rebuild_metadata",
        "rebuild the SQLite catalogue from the cold store's manifests",
    ),
    "demo": ("tieredstore.cli.commands.demo", "synth -> tier -> verify, end to end, locally"),
    "expire": (
        "tieredstore.cli.commands.expire",
        "apply retention now (--dry-run: show what and why)",
    ),
    "gc": ("tieredstore.cli.commands.gc", "remove uncommitted cold objects older than the grace"),
    "repair": (
        "tieredstore.cli.commands.repair",
        "quarantine a DIVERGED queue's cold tail, resume",
    ),
    "restore": (
        "tieredstore.cli.commands.restore",
        "rebuild a broker store from the cold store (--check: verify one)",
    ),
    "lease": (
        "tieredstore.cli.commands.lease",
        "show the writer lease, or break one whose holder is gone (break --force)",
    ),
    "check-cold": (
        "tieredstore.cli.commands.check_cold",
        "try list, get, conditional create and delete on the cold store (run it first)",
    ),
    "resume": (
        "tieredstore.cli.commands.resume",
        "resume a PAUSED queue, recording the offsets lost before tiering (--accept-loss)",
    ),
}


class _Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line and exits 3, not 2.

    Flags must be spelt out: ``allow_abbrev`` is off, so ``--stor`` is an unknown flag
    rather than a silent ``--store`` (and a flag added later cannot change what an old
    abbreviation meant).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        # ``-5m`` or ``-1.5`` after a flag is its (bad) value, which the flag's own check
        # then names ("must not be negative"), not a flag: argparse's default takes
        # ``-5m`` for an unknown option and says "expected one argument".
        self._negative_number_matcher = NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def refuse_unknown(self, extra: Sequence[str]) -> NoReturn:
        """One line: the command, the unknown arguments, the closest flags it has."""
        self.error(f"unrecognized arguments: {' '.join(extra)}{did_you_mean(self, extra)} "
                   f"(see {self.prog} --help)")  # fmt: skip


#: What argparse takes for a value rather than a flag: a number, with a unit after it.
NEGATIVE_VALUE: Final = re.compile(r"^-(\d+\.?\d*|\.\d+)[A-Za-z]*$")


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of ``parser`` and of its subcommands' parsers (``lease show``)."""
    flags: list[str] = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += _flags(sub)
    return flags


def _unknown_flag(arg: str, parser: argparse.ArgumentParser) -> bool:
    return arg.startswith("--") and arg != "--" and arg.split("=", 1)[0] not in _flags(parser)


def did_you_mean(parser: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """``; did you mean --store?`` for the first unknown flag close to one of
    ``parser``'s, else ``""``."""
    flags = _flags(parser)
    for arg in extra:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.75)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def _version() -> str:
    try:
        return version("tieredstore")
    except PackageNotFoundError:  # run from a source tree without an install
        return "unknown"


def _load(name: str) -> _Command:
    return cast(_Command, importlib.import_module(COMMANDS[name][0]))


def build_parser(command: str | None) -> tuple[_Parser, dict[str, _Parser]]:
    """The top-level parser and each command's parser (only ``command`` gets its flags)."""
    parser = _Parser(prog="tieredstore", description="Tiered storage sidecar for Apache RocketMQ")
    parser.add_argument("--version", action="version", version=f"tieredstore {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    parsers: dict[str, _Parser] = {}
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _load(name).add_arguments(p)
        parsers[name] = p
    return parser, parsers


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if a in COMMANDS), None)
    parser, parsers = build_parser(command)
    if command is not None:  # a typo'd flag is named first, not as a missing required one
        unknown = [a for a in args_list if _unknown_flag(a, parsers[command])]
        if unknown:
            parsers[command].refuse_unknown(unknown)
    args, extra = parser.parse_known_args(args_list)
    if extra:
        parsers[args.command].refuse_unknown(extra)
    with _TermAsInterrupt() as stop:
        try:
            return _run(args)
        except KeyboardInterrupt:
            hint = AFTER_INTERRUPT.get(args.command, "")
            print(f"tieredstore {args.command}: interrupted by {stop.name}{hint}", file=sys.stderr)
            return 128 + int(stop.signal)


#: What an interrupted command's one line adds: how to carry on where it stopped.
AFTER_INTERRUPT: Final = {
    "restore": "; run the same command again to resume where it stopped",
    "export": "; run it again to continue where it stopped (exported segments are kept)",
}


class _TermAsInterrupt:
    """While a command runs, SIGTERM stops it as Ctrl-C does, and says which it was.

    Python turns SIGINT into KeyboardInterrupt (inside ``asyncio.run``: the main task
    is cancelled first, so ``finally`` blocks and context managers close what they
    opened); SIGTERM would kill the process with no word and no cleanup. Here SIGTERM
    raises SIGINT after noting itself, so each tool stops one way and the CLI exits 143
    (130 for SIGINT) with one line. ``run``'s loop installs its own handlers meanwhile.
    """

    def __init__(self) -> None:
        self.signal = signal.SIGINT
        self._previous: Any = None

    @property
    def name(self) -> str:
        return self.signal.name

    def __enter__(self) -> _TermAsInterrupt:
        if threading.current_thread() is threading.main_thread():  # else: not ours to set
            self._previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_term(self, _signum: int, _frame: FrameType | None) -> None:
        self.signal = signal.SIGTERM
        signal.raise_signal(signal.SIGINT)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command, translating our errors into one line and an exit code."""
    try:
        return _load(args.command).run(args)
    except (
        ConfigError,
        NotAStoreError,
        CatalogueMismatchError,
        ColdStoreUnreachableError,
        ColdStoreAccessError,
    ) as exc:
        print(f"tieredstore {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TieredStoreError as exc:
        print(f"tieredstore {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def entry() -> NoReturn:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: not an error of ours
        code = EXIT_OK
        sys.stdout = None  # suppress the flush-at-exit error
    sys.exit(code)
