"""Type stub of the native gather (``_gather.c``): see ``tieredstore.hot.commitlog.copy_parts``
and ``copy_parts_into``.

Each part is ``(source, starts, ends)``: any object exporting a contiguous buffer
(TypeError otherwise) and two buffers of int64s.
"""

from collections.abc import Sequence

def gather(parts: Sequence[tuple[object, object, object]], /) -> bytearray: ...
def gather_into(parts: Sequence[tuple[object, object, object]], out: object, /) -> int: ...
