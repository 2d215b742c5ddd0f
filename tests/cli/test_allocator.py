"""The sidecar pins glibc's mmap threshold, so a freed large block leaves its RSS.

Each case runs in a fresh interpreter (the allocator's rule is process-wide): a 16 MiB
block is freed, then a 15 MiB one is made and freed. Under glibc's default (dynamic)
rule the first free raises the threshold, the second block comes from the heap and
stays resident; with :func:`fix_mmap_threshold` both are unmapped.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
from tieredstore.cli.sidecar.allocator import fix_mmap_threshold

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
first = b"\\1" * (16 << 20)
del first
before = rss()
second = b"\\2" * (15 << 20)
del second
print((rss() - before) >> 20)
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="VmRSS and glibc's mallopt are Linux's"
)


def _retained_mib(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], check=True, capture_output=True, text=True
    )
    return int(out.stdout.strip())


def test_a_freed_large_block_stays_resident_under_the_default_rule() -> None:
    # The control: what the fix is for (fails if the C library no longer does this).
    assert _retained_mib("default") >= 12


def test_with_the_threshold_fixed_a_freed_large_block_goes_back() -> None:
    assert _retained_mib("fixed") <= 2
