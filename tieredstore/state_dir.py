"""The sidecar's state directory (``state.dir``): the names of what more than one layer
opens there.

The catalogue's database file is :data:`CATALOGUE_FILE`: :mod:`metadata` creates and
writes it (``tieredstore.metadata.database.DB_NAME`` is this name), the verifier reads it read-only
(``tieredstore.verifier.catalogue_reader``), and both find it only here, so a rename cannot leave
one of them looking for the old file. What one layer alone keeps there is named by its own
module (the catalogue's lock in :mod:`tieredstore.metadata.database`, the STOPPED queues in
``tieredstore.dispatcher.stopped_file``, the cold store's refusals in
``tieredstore.dispatcher.cold_access``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["CATALOGUE_FILE"]

#: The SQLite catalogue, ``<state.dir>/catalogue.sqlite3``.
CATALOGUE_FILE: Final = "catalogue.sqlite3"
