"""The cold store's access flags, shared by the single-broker run and ``--fleet``:
``--endpoint-url``, ``--region`` and ``--storage-option``, declared and parsed once.

Each stands for a sidecar setting (:mod:`tieredstore.settings.flags`); a bad
``--storage-option`` is a :class:`~tieredstore.errors.ConfigError` naming the flag.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tieredstore.errors import ConfigError
from tieredstore.settings.flags import setting_help

__all__ = ["add_storage_arguments", "storage_options"]


def add_storage_arguments(p: argparse.ArgumentParser) -> None:
    """Add the three access flags to ``p``."""
    p.add_argument(
        "--endpoint-url",
        default=None,
        help=setting_help("--endpoint-url", "S3 endpoint URL (MinIO, moto, ...)"),
    )
    p.add_argument("--region", default=None, help=setting_help("--region", "S3 region"))
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra fsspec storage option (VALUE parsed as JSON when it is JSON); repeatable",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    """The fsspec storage options the flags give (ConfigError for a bad one)."""
    opts: dict[str, Any] = {}
    if args.endpoint_url:
        opts["endpoint_url"] = args.endpoint_url
    if args.region:
        opts["client_kwargs"] = {"region_name": args.region}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"bad --storage-option {item!r}: expected KEY=VALUE")
        try:
            opts[key] = json.loads(value)
        except ValueError:
            opts[key] = value
    return opts
