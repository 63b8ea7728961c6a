"""The card bench's host-RAM limit: a RAM balloon (a process holding touched anonymous memory until the machine's
MemAvailable is down to the limit), or a cgroup v2 child with memory.max where /sys/fs/cgroup is writable.

    python -m bench.cards.host_balloon 24      # holds memory until MemAvailable is about 24 GiB, prints
                                               # `BALLOON <held> <available before> <available reached> <oom>` and
                                               # waits on stdin (the parent kills it after the row's process ends)

MemAvailable (/proc/meminfo) is what ComfyUI reads as free RAM (psutil.virtual_memory().available). The balloon's
pages are anonymous and written, so without swap the kernel can neither reclaim nor share them; it asks to be
the OOM killer's last choice (oom_score_adj -1000, where allowed), and the card's process is started with +1000,
so a row that needs more RAM than the limit is the one killed. Standard library only.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .host_memory import mem_available

GIB = 2 ** 30
PAGE = 4096
STEP = GIB
TOLERANCE = 64 * 2 ** 20
CGROUP_ROOT = Path("/sys/fs/cgroup")


class BalloonError(RuntimeError):
    """The balloon did not start or could not reach the limit; the message says what it saw."""


def host_ram_value(text: str) -> float | None:
    """--host-ram-gb's argument type: GiB, or `all` (None: no limit)."""
    import argparse

    if text.lower() == "all":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a host RAM size in GiB (16, 24.5) or `all`") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a host RAM size must be above 0 GiB")
    return value


def fill_step(available: int, target: int, step: int = STEP, tolerance: int = TOLERANCE, page: int = PAGE) -> int:
    """The bytes the balloon takes next: the gap down to `target` MemAvailable, at most `step`, in whole pages; 0
    once within `tolerance` of the target (or below it: the balloon never gives back)."""
    gap = available - target
    if gap <= tolerance:
        return 0
    return min(step, gap) // page * page


@dataclass(frozen=True)
class HostLimit:
    """How a row's host RAM was limited: the limit (None: the whole machine), the means ("balloon", "cgroup",
    None), the balloon's bytes and MemAvailable when the row's process started."""

    host_ram_gib: float | None = None
    host_ram_limit: str | None = None
    balloon_bytes: int = 0
    mem_available_start_bytes: int | None = None

    def as_row(self) -> dict:
        return asdict(self)


def read_mem_available() -> int | None:
    try:
        return mem_available(Path("/proc/meminfo").read_text())
    except OSError:  # named: no /proc (not Linux)
        return None


def _touch(m: mmap.mmap, pattern: memoryview) -> None:
    """Write every byte of `m` (so every page is backed by RAM)."""
    size = len(m)
    for off in range(0, size, len(pattern)):
        k = min(len(pattern), size - off)
        m[off:off + k] = pattern[:k]


def balloon(limit_gib: float) -> int:
    """The balloon process: fill to `limit_gib` of MemAvailable, print what it holds, wait on stdin."""
    try:
        Path("/proc/self/oom_score_adj").write_text("-1000")
        oom = "protected"
    except OSError:  # named: lowering it needs CAP_SYS_RESOURCE; the card's process is still raised to +1000
        oom = "unprotected"
    target = int(limit_gib * GIB)
    start = read_mem_available()
    if start is None:
        print("BALLOON_ERROR no /proc/meminfo MemAvailable here", flush=True)
        return 2
    pattern = memoryview(b"\x01" * (64 * 2 ** 20))
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    held: list[mmap.mmap] = []
    available = start
    for _ in range(4096):  # at most 4 TiB in 1 GiB steps
        n = fill_step(available, target)
        if n == 0:
            break
        m = mmap.mmap(-1, n, flags=flags)
        _touch(m, pattern)
        held.append(m)
        available = read_mem_available() or 0
    print(f"BALLOON {sum(len(m) for m in held)} {start} {available} {oom}", flush=True)
    sys.stdin.read()
    return 0


def start_balloon(limit_gib: float, cwd: str | os.PathLike) -> tuple[subprocess.Popen, HostLimit]:
    """A balloon process for `limit_gib`, filled (its line read), and the rows' HostLimit."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.cards.host_balloon", str(limit_gib)], cwd=cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = (proc.stdout.readline() if proc.stdout is not None else "").split()
    if len(line) != 5 or line[0] != "BALLOON":
        proc.kill()
        proc.wait()
        raise BalloonError(f"the RAM balloon for {limit_gib:g} GiB did not start: {' '.join(line) or 'no output'}")
    held, before, reached = int(line[1]), int(line[2]), int(line[3])
    print(f"host RAM {limit_gib:g} GiB: balloon holds {held / GIB:.2f} GiB (OOM killer: {line[4]}), MemAvailable "
          f"{before / GIB:.2f} -> {reached / GIB:.2f} GiB", flush=True)
    if reached > (limit_gib + 1) * GIB:
        print(f"host RAM {limit_gib:g} GiB: MemAvailable stayed {reached / GIB:.2f} GiB, over the limit", flush=True)
    return proc, HostLimit(host_ram_gib=limit_gib, host_ram_limit="balloon", balloon_bytes=held,
                           mem_available_start_bytes=reached)


def end_balloon(balloon: subprocess.Popen, where: str) -> None:
    """End a balloon after the processes it limited; say so when it had ended before them (the limit did not hold)."""
    if balloon.poll() is not None:
        print(f"{where}: the RAM balloon had ended (exit {balloon.returncode}): the limit did not hold to the end",
              flush=True)
    balloon.kill()
    balloon.wait()


def make_cgroup(limit_gib: float, name: str, root: Path = CGROUP_ROOT) -> tuple[Path | None, str]:
    """A cgroup v2 child of `root` with memory.max = the limit (and no swap): its folder, or None and why not."""
    controllers = root / "cgroup.controllers"
    if not controllers.is_file() or "memory" not in controllers.read_text().split():
        return None, f"{root} is not a cgroup v2 hierarchy with the memory controller"
    if not os.access(root, os.W_OK):
        return None, f"{root} is not writable here"
    folder = root / name
    try:
        subtree = root / "cgroup.subtree_control"
        if "memory" not in subtree.read_text().split():
            subtree.write_text("+memory")
        folder.mkdir(exist_ok=True)
        (folder / "memory.max").write_text(str(int(limit_gib * GIB)))
        if (folder / "memory.swap.max").exists():
            (folder / "memory.swap.max").write_text("0")
    except OSError as error:  # named: EBUSY (processes in root), EACCES, EROFS: the caller falls back to the balloon
        return None, f"cgroup {folder}: {error}"
    return folder, "ok"


def remove_cgroup(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError as error:  # named: a process still in it; the next run reuses the folder (memory.max rewritten)
        print(f"cgroup {folder} not removed: {error}", flush=True)


def child_preexec(cgroup: Path | None):
    """The card process's first act before exec: into `cgroup` (when given) and first in line for the OOM killer."""

    def preexec() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text("0")
        try:
            Path("/proc/self/oom_score_adj").write_text("1000")
        except OSError:  # named: no /proc; nothing else to do
            pass

    return preexec


if __name__ == "__main__":
    sys.exit(balloon(float(sys.argv[1])))
