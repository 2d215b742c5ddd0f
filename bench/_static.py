"""A static HTTP file server over a directory: the read service's fair baseline.

``python bench/_static.py DIR PORT`` serves ``DIR``'s files at ``/<path>`` on
``127.0.0.1:PORT`` with aiohttp's own static route (``FileResponse``: ``sendfile`` of the
file's range, ``Range`` requests answered with 206) in one process and one event loop,
as the sidecar serves its read API, and prints ``static server listening on PORT`` once
it accepts connections. It runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web


def main(argv: list[str]) -> None:
    root, port = Path(argv[0]), int(argv[1])
    app = web.Application()
    app.router.add_static("/", root)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        print=lambda _msg: print(f"static server listening on {port}", flush=True),
        access_log=None,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
