"""Headless Chromium (Debian package ``chromium``) for the report layout tests.

:func:`layout` loads a copy of a page with a small probe script appended (the page itself
has no script) in a window of the given width, and returns what the probe measured:
the document's scroll and client widths, and the right edge of the body's content box
and of every table — so a test can assert that nothing is wider than the window.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Layout", "chromium", "layout"]

_PROBE = """<script>
(function () {
  var d = document.documentElement, b = document.body, s = getComputedStyle(b);
  var right = b.getBoundingClientRect().right - parseFloat(s.paddingRight);
  var tables = [].map.call(document.querySelectorAll("table"), function (t) {
    return [t.id, t.getBoundingClientRect().right];
  });
  var out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify({scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
                                    contentRight: right, tables: tables});
  b.appendChild(out);
})();
</script>"""


def chromium() -> str | None:
    """The Chromium binary, or None when it is not installed."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


def browser_command(tmp: Path) -> list[str]:
    """Headless Chromium with everything that would reach out or need a desktop off."""
    return [
        str(chromium()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        f"--user-data-dir={tmp / 'chromium-profile'}",
    ]


@dataclass(frozen=True)
class Layout:
    scroll_width: int
    client_width: int
    content_right: float
    tables: dict[str, float]

    @property
    def overflows(self) -> bool:
        """Wider than the window, or a table reaching past the body's content box."""
        return self.scroll_width > self.client_width or any(
            right > self.content_right + 0.5 for right in self.tables.values()
        )


def layout(page: Path, width: int, tmp: Path) -> Layout:
    """Measure ``page`` in a ``width`` px wide window (see the module doc)."""
    probe = tmp / f"probe-{page.name}"
    html = page.read_text(encoding="utf-8")
    probe.write_text(html.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run(
        [*browser_command(tmp), f"--window-size={width},900", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r'<pre id="layout-probe">([^<]*)</pre>', dom)
    assert found is not None, f"the probe did not run: {dom[-500:]}"
    doc = json.loads(found.group(1).replace("&quot;", '"'))
    return Layout(
        scroll_width=int(doc["scrollWidth"]),
        client_width=int(doc["clientWidth"]),
        content_right=float(doc["contentRight"]),
        tables={str(k): float(v) for k, v in doc["tables"]},
    )
