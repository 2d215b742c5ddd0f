"""Shared flags for commands that load the sidecar settings (run, status, expire, ...)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tieredstore.settings.flags import setting_help, settings_by_dest
from tieredstore.settings.loader import Settings, check_environment, load_settings
from tieredstore.settings.values import LOG_FORMATS, LOG_LEVELS

#: flag dest → setting key (:data:`~tieredstore.settings.flags.SETTING_FLAGS`)
_FLAGS: dict[str, str] = settings_by_dest()


def add_settings_arguments(p: argparse.ArgumentParser, *, store: bool = True) -> None:
    """``--config`` plus the flags that override the most common settings."""
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML config file (default: $TIEREDSTORE_CONFIG if set)",
    )
    if store:
        p.add_argument("--store", help=setting_help("--store", "broker store root"))
    p.add_argument("--cold", help=setting_help("--cold", "cold store URL"))
    p.add_argument("--cluster", help=setting_help("--cluster", "broker cluster name"))
    p.add_argument("--broker", help=setting_help("--broker", "broker name"))
    p.add_argument(
        "--state-dir", help=setting_help("--state-dir", "state directory for the catalogue")
    )
    p.add_argument("--endpoint-url", help=setting_help("--endpoint-url", "S3 endpoint URL"))
    p.add_argument("--log-format", choices=LOG_FORMATS, help=setting_help("--log-format"))
    p.add_argument("--log-level", choices=LOG_LEVELS, help=setting_help("--log-level"))


def settings_from_args(
    args: argparse.Namespace, *, extra: dict[str, object] | None = None, check: bool = True
) -> Settings:
    """Load settings from file/env/flags and (``check``) the machine; ConfigError if bad."""
    config = args.config
    if config is None and os.environ.get("TIEREDSTORE_CONFIG"):
        config = Path(os.environ["TIEREDSTORE_CONFIG"])
    overrides: dict[str, object] = {key: getattr(args, dest, None) for dest, key in _FLAGS.items()}
    overrides.update(extra or {})
    settings = load_settings(config, overrides=overrides)
    if check:
        check_environment(settings)
    return settings


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text: str) -> int:
    """argparse type for a whole number >= 1 (``--count``, ``--jobs``, ...)."""
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type for a whole number >= 0 (``--max-bytes-per-second``, ...)."""
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def parse_time(text: str) -> int:
    """argparse type for a store time: epoch milliseconds, or ISO 8601 (no zone = UTC).

    One parser for every command that takes a time (``read --timestamp``, ``export
    --since``, ``restore --since``), so an operator can paste the same value anywhere.
    """
    if text.strip().isdigit():
        return int(text)
    try:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time "
            "(e.g. 1764098400000 or 2026-11-25T19:20:00)"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    ms = int(stamp.timestamp() * 1000)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return ms


def print_dry_run(plan: Sequence[str]) -> int:
    """Print what a ``--dry-run`` would do (``plan``: its lines); exit status 0."""
    print("\n".join(["dry run: nothing changed", *plan]))
    return 0
