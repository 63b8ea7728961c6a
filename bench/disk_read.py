"""Sequential read speed of a file from a cold page cache: what a model load or a weight stream from disk gets.

    python -m bench.disk_read FILE [--gib 8]     # GB/s (1e9 bytes/s), 16 MiB reads, after POSIX_FADV_DONTNEED
    python -m bench.disk_read --smoke           # a 64 MiB temporary file (proves the script runs; its number is not
                                                # a disk's: the file may still sit in a cache below the kernel)

The card bench's parent runs it once on the checkpoint before host-RAM rows (`--host-ram-gb`) and records the
result as each row's `disk_read_gbps`. `drop_page_cache` is what starts every such row cold: the file's dirty pages
are written back (fsync), then the kernel is told to drop its cached pages (POSIX_FADV_DONTNEED; clean pages
only, Linux).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BLOCK = 16 * 2 ** 20


@dataclass(frozen=True)
class DiskRead:
    path: str
    bytes_read: int
    seconds: float
    dropped_cache: bool

    @property
    def gbps(self) -> float:
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "gbps": round(self.gbps, 3)}


def drop_page_cache(path: str | os.PathLike) -> bool:
    """Write back and drop `path`'s cached pages; False where the platform has no posix_fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def read_speed(path: str | os.PathLike, max_bytes: int, block: int = BLOCK) -> DiskRead:
    """Read up to `max_bytes` of `path` sequentially in `block`-byte reads from a cold page cache."""
    dropped = drop_page_cache(path)
    buf = bytearray(block)
    view = memoryview(buf)
    done = 0
    with open(path, "rb", buffering=0) as f:
        t0 = time.perf_counter()
        while done < max_bytes:
            n = f.readinto(view[:min(block, max_bytes - done)])
            if not n:
                break
            done += n
        seconds = time.perf_counter() - t0
    drop_page_cache(path)  # the rows after it start as cold as the measurement did
    return DiskRead(path=os.fspath(path), bytes_read=done, seconds=seconds, dropped_cache=dropped)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.disk_read", description=__doc__.splitlines()[0])
    p.add_argument("file", nargs="?", type=Path)
    p.add_argument("--gib", type=float, default=8.0, help="read at most this many GiB (default 8)")
    p.add_argument("--smoke", action="store_true", help="a 64 MiB temporary file")
    a = p.parse_args(argv)
    if a.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "disk_read_smoke.bin"
            path.write_bytes(os.urandom(BLOCK) * 4)
            result = read_speed(path, 4 * BLOCK)
        print(json.dumps(result.as_dict()))
        return 0 if result.bytes_read == 4 * BLOCK else 1
    if a.file is None:
        p.error("FILE is required (or --smoke)")
    print(json.dumps(read_speed(a.file, int(a.gib * 2 ** 30)).as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
