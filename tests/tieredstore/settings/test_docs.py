"""docs/configuration.md's settings tables and docs/sidecar.toml are what the declaration
of the settings (tieredstore/settings/declaration.py) renders: a setting added, changed or removed
there fails here until ``make docs`` has rewritten them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tieredstore.settings import docs as config_docs
from tieredstore.settings.declaration import SECTIONS, SETTINGS, StoreSettings

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_configuration_md_tables_are_generated_from_the_declaration() -> None:
    current = (DOCS / "configuration.md").read_text()
    assert current == config_docs.render_configuration_md(current), (
        "docs/configuration.md's settings tables differ from tieredstore/settings/declaration.py: "
        "run make docs"
    )


def test_sidecar_toml_is_generated_from_the_declaration() -> None:
    assert (DOCS / "sidecar.toml").read_text() == config_docs.render_sidecar_toml(), (
        "docs/sidecar.toml differs from tieredstore/settings/declaration.py: run make docs"
    )


def test_check_mode_reports_stale_docs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("configuration.md", "sidecar.toml"):
        (tmp_path / name).write_text((DOCS / name).read_text())
    assert config_docs.main(["--docs", str(tmp_path), "--check"]) == 0
    toml = tmp_path / "sidecar.toml"
    toml.write_text(toml.read_text().replace('segment_max_age = "60s"', 'segment_max_age = "1m"'))
    assert config_docs.main(["--docs", str(tmp_path), "--check"]) == 1
    assert (
        "sidecar.toml is not what tieredstore/settings/declaration.py declares"
        in capsys.readouterr().out
    )
    assert config_docs.main(["--docs", str(tmp_path)]) == 0
    assert toml.read_text() == config_docs.render_sidecar_toml()


def test_the_tables_show_every_key_once_with_its_declared_help() -> None:
    tables = config_docs.render_tables()
    for s in SETTINGS:
        assert tables.count(f"| `{s.key}` |") == 1, s.key
        assert f"| {s.help} |" in tables, s.key
    for name, section in SECTIONS.items():
        assert f"## `[{name}]` — {section.TITLE}" in tables


def test_the_markers_are_required() -> None:
    with pytest.raises(ValueError, match="lacks the markers"):
        config_docs.render_configuration_md("# no markers here\n")


def test_every_field_is_declared_with_key_or_required() -> None:
    """A section field without a declaration would have no parser, default or help."""
    for section in SECTIONS.values():
        for f in dataclasses.fields(section):
            assert "tieredstore.setting" in f.metadata, f"{section.SECTION}.{f.name}"
    assert {s.key for s in StoreSettings.settings()} == {
        "store.path",
        "store.commitlog_dir",
        "store.config_dir",
    }


def test_every_setting_the_docs_name_exists() -> None:
    """A renamed or removed key leaves no stale mention in the prose (``cold.url``)."""
    root = DOCS.parent
    keys = {s.key for s in SETTINGS}
    sections = "|".join(SECTIONS)
    mention = re.compile(rf"`((?:{sections})\.([a-z_]+))`")
    files = [root / "README.md", root / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
    named: set[str] = set()
    for path in files:
        for m in mention.finditer(path.read_text()):
            if m.group(2) not in _FILE_SUFFIXES:  # `http.py`, `store.log`: files
                named.add(m.group(1))
                assert m.group(1) in keys, f"{path.name} names {m.group(1)}: no such setting"
    assert {"cold.url", "tiering.init_policy", "lease.wait"} <= named


_FILE_SUFFIXES = frozenset({"py", "log", "md", "json", "toml", "yml", "yaml"})
