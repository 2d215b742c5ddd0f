"""The options of the ``tieredstore`` Spark data source, checked in one place.

============================  ========================================================
option                        meaning
============================  ========================================================
``cold`` (or the load path)   cold store root URL: a path, ``file://``, ``s3://``...
``cluster``                   the cluster whose cold prefix is read (required)
``broker``                    one broker, or several separated by commas; leave it out
                              to read every broker under the cluster's prefix
``endpoint_url``              S3 endpoint (MinIO, moto, ...)
``region``                    S3 region
``storage.<name>``            any other fsspec storage option, e.g. ``storage.key``;
                              the value is parsed as JSON when it is JSON
``trace_dir``                 a local directory: every task writes one small JSON file
                              per segment it opens (which segments a query touched)
``prune``                     ``true``: prune segments by the query's filters (off by
                              default: Spark 4.1-4.3 reuse one query's pruned plan for
                              a later query without filters on the same DataFrame;
                              turn it on only for a DataFrame that serves one query)
============================  ========================================================

Spark hands options over with lower-cased names, so names are case-insensitive. Every
problem — an unknown or missing option, a name the cold layout refuses, ``memory://``
(one process's memory, invisible to Spark's Python workers) — is a
:class:`~tieredstore.errors.ConfigError` whose message is one line naming the option.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tieredstore.cold.layout import cluster_dir, validate_name
from tieredstore.errors import ConfigError, InvalidNameError
from tieredstore.verifier.readers import ColdLocation

__all__ = ["SOURCE_NAME", "ArchiveOptions", "parse_options"]

#: The format name: ``spark.read.format("tieredstore")``.
SOURCE_NAME: Final = "tieredstore"

_PLAIN: Final = (
    "cold", "path", "cluster", "broker", "endpoint_url", "region", "trace_dir", "prune",
)  # fmt: skip
_STORAGE_PREFIX: Final = "storage."


@dataclass(frozen=True)
class ArchiveOptions:
    """Validated options (picklable: they travel to Spark's Python workers).

    ``brokers`` is empty when every broker of the cluster is read.
    """

    cold: ColdLocation
    cluster: str
    brokers: tuple[str, ...] = ()
    trace_dir: str | None = None
    prune: bool = False


def _error(message: str) -> ConfigError:
    return ConfigError(f"{SOURCE_NAME} data source: {message}")


def _storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if options.get("endpoint_url"):
        out["endpoint_url"] = options["endpoint_url"]
    if options.get("region"):
        out["client_kwargs"] = {"region_name": options["region"]}
    for name, value in options.items():
        if not name.startswith(_STORAGE_PREFIX):
            continue
        key = name[len(_STORAGE_PREFIX) :]
        if not key:
            raise _error(f"option {name!r} names no storage option")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _cold_url(options: Mapping[str, str]) -> str:
    cold, path = options.get("cold", "").strip(), options.get("path", "").strip()
    if cold and path and cold != path:
        raise _error(f"option 'cold' ({cold}) and the load path ({path}) disagree")
    url = cold or path
    if not url:
        raise _error("option 'cold' is required (the cold store URL)")
    if url.lower().startswith("memory://"):
        raise _error(
            f"cannot read {url}: memory:// lives in one process, Spark's Python workers "
            "run in others"
        )
    return url


def _names(options: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    cluster = options.get("cluster", "").strip()
    if not cluster:
        raise _error("option 'cluster' is required")
    brokers = tuple(b.strip() for b in options.get("broker", "").split(",") if b.strip())
    if "broker" in options and not brokers:
        raise _error("option 'broker' is empty (leave it out to read every broker)")
    try:
        cluster_dir(cluster)
        for broker in brokers:
            validate_name(broker, what="broker")
    except InvalidNameError as exc:
        raise _error(exc.message) from exc
    return cluster, tuple(dict.fromkeys(brokers))


def parse_options(options: Mapping[str, str]) -> ArchiveOptions:
    """Check the data source's options (names compared lower-cased).

    Raises:
        ConfigError: one line naming the option at fault.
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in _PLAIN and not k.startswith(_STORAGE_PREFIX))
    if unknown:
        known = ", ".join([*(k for k in _PLAIN if k != "path"), f"{_STORAGE_PREFIX}<name>"])
        raise _error(f"unknown option {unknown[0]!r} (known: {known})")
    url = _cold_url(lowered)
    cluster, brokers = _names(lowered)
    storage = _storage_options(lowered)
    trace_dir = lowered.get("trace_dir", "").strip() or None
    return ArchiveOptions(
        cold=ColdLocation(url, storage),
        cluster=cluster,
        brokers=brokers,
        trace_dir=trace_dir,
        prune=_flag(lowered, "prune"),
    )


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise _error(f"option {name!r} must be true or false, got {options[name]!r}")
    return value == "true"
