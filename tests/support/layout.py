"""The product's folders: one ``tieredstore`` namespace kept in five folders.

The core is the folder ``tieredstore/`` (the package ``tieredstore``); each layer above it
keeps its own folder at the top of the repository and is linked from the core's folder
(``tieredstore/metadata`` → ``../metadata``), so it is imported as ``tieredstore.metadata``.
Tests that read the sources walk :data:`PRODUCT_FOLDERS` (``Path.rglob`` does not follow
the links, so each file is seen once, under its own folder).
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]

#: The folders of the layers above the core, each linked from ``tieredstore/``.
LAYER_FOLDERS = ("metadata", "dispatcher", "verifier", "cli")

#: Every product folder: the core first, then the layers above it.
PRODUCT_FOLDERS = ("tieredstore", *LAYER_FOLDERS)
