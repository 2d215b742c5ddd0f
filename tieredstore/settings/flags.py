"""The command-line flags that stand for a setting, each said once: which setting a flag
overrides.

The sidecar's commands (``run``, ``status``, ``expire``, ...; ``tieredstore.cli``) and the
verifier (``tieredstore verify``, ``python -m tieredstore.verifier``, which reads the sidecar's
``--config`` too) name the same settings by the same flags. A command declares such a
flag with :func:`setting_help` (its help ends with the setting in brackets:
``broker name [cold.broker]``) and reads what was given with :func:`settings_by_dest`
(``{argparse dest: setting}``); a flag given wins over the file and the environment
(:func:`~tieredstore.settings.loader.load_settings`' ``overrides``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["SETTING_FLAGS", "setting_help", "settings_by_dest"]

#: flag → the setting it stands for.
SETTING_FLAGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "--store": "store.path",
        "--cold": "cold.url",
        "--cluster": "cold.cluster",
        "--broker": "cold.broker",
        "--state-dir": "state.dir",
        "--endpoint-url": "cold.endpoint_url",
        "--region": "cold.region",
        "--log-format": "log.format",
        "--log-level": "log.level",
    }
)


def setting_help(flag: str, text: str = "", *, more: str = "") -> str:
    """The help of ``flag``: ``text``, then the setting it stands for in brackets
    (``broker name [cold.broker]``; no ``text``: ``[log.format]``); ``more`` follows the
    setting inside the brackets (``[state.dir; with --config, ...]``). KeyError for a
    flag that stands for no setting."""
    key = SETTING_FLAGS[flag]
    said = f"[{key}; {more}]" if more else f"[{key}]"
    return f"{text} {said}" if text else said


def settings_by_dest(dests: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{argparse dest: setting}`` for every flag of :data:`SETTING_FLAGS`.

    A flag's dest is argparse's own (``--state-dir`` → ``state_dir``) unless ``dests``
    names another (a flag declared with ``dest=``, e.g. the verifier's ``--store`` kept
    as ``hot``). A parser need not declare every flag: read the dests with
    ``getattr(args, dest, None)`` (None: not given).
    """
    renamed = dests or {}
    unknown = set(renamed) - set(SETTING_FLAGS)
    if unknown:
        raise KeyError(f"not a setting's flag: {', '.join(sorted(unknown))}")
    return {
        renamed.get(flag, flag.lstrip("-").replace("-", "_")): key
        for flag, key in SETTING_FLAGS.items()
    }
