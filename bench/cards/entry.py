"""The card bench's entry point: its arguments and the parent process (checkpoints, the ballast, one child process
per card, restarted past a row it died in), and the advised rerun a refusal asks for."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from longmedia.units import GIB

from . import comfy_process
from .cells import bench_lora_name, grid
from .checks import EXTRAS
from .host_balloon import (
    BalloonError,
    HostLimit,
    child_preexec,
    end_balloon,
    host_ram_value,
    make_cgroup,
    remove_cgroup,
    start_balloon,
)
from .host_table import host_table
from .prompts import CONTROLS_HELP, JOB, sampler_name
from .rows import ROWS_FILE, CardFields, Cell, append_row, done_cells, read_rows
from .tables import compare, tables

REPO = Path(__file__).resolve().parents[2]
DESCRIPTION = "End to end in real ComfyUI (PromptExecutor) under simulated 8/12/16/24 GiB cards: stock vs LongMedia auto."


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.cards", description=DESCRIPTION)
    p.add_argument("--cards", type=float, nargs="*", default=[8, 12, 16, 24], help="simulated card sizes, GiB")
    p.add_argument("--seconds", type=float, nargs="*", default=[5, 10, 14.4, 20])
    p.add_argument("--formats", nargs="*", default=["int8", "bf16"], choices=["int8", "bf16"])
    p.add_argument("--samplers", nargs="*", default=["longmedia", "stock"], type=sampler_name,
                   help="longmedia, stock, or a control; name#N runs that sampler again in the same card process, "
                        "as its own row (stock stock#2: is stock the same twice?). " + CONTROLS_HELP)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--extras", action="store_true", help="on the 16 GiB card, INT8 (bench/cards/extras.py): "
                   "injected OOM per phase (on the --oom-blocks model, 5 s), three seed-only reruns (same boundary "
                   "and plan?), an interrupt mid step 1 then a rerun (equal to the fresh run?), a 3-pass segmented "
                   "job (s/step drift), attention_mode sol / scheduled_sol; each with a pass/fail check")
    p.add_argument("--extras-only", action="store_true", help="run only the extras (no main table rows)")
    p.add_argument("--extras-steps", type=int, default=1, help="sampler steps of the extras (the segmented job "
                   "runs at least 2: its check compares warm steps)")
    p.add_argument("--extras-seconds", type=float, default=5.0, help="job length of the seed-only reruns and the "
                   "interrupt (the segmented job and sol / scheduled_sol run the 14.4 s job)")
    p.add_argument("--extras-which", nargs="*", default=None, choices=EXTRAS,
                   help="run only these extras (default: all); interrupt runs seeds too (its rerun is compared with "
                        "seed 1's fresh run). A long full-depth list can be split over two device calls")
    p.add_argument("--oom-modes", nargs="+", default=["normal", "low_vram"], choices=["normal", "low_vram"],
                   help="memory modes of the injected-OOM rows (default: both)")
    p.add_argument("--oom-blocks", type=int, default=None, help="DiT blocks of the model the injected-OOM rows use "
                   "(default: --blocks, the full-depth model issue 14 names; 2 keeps them cheap)")
    p.add_argument("--smoke", action="store_true", help="2 blocks, 1 step, 16 GiB, INT8 5 s, both samplers")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench_out")))
    p.add_argument("--simulate", choices=["ballast", "reserve"], default="ballast",
                   help="ballast (default): a second process holds all device memory but the card, so every "
                   "allocator (torch, comfy-aimdo) meets a real limit; reserve: --reserve-vram + torch's "
                   "memory fraction only (comfy-aimdo's own allocations are not capped)")
    p.add_argument("--models", type=Path, default=Path("/tmp/longmedia_models"))
    p.add_argument("--budget-s", type=float, default=540.0, help="stop starting rows after this many seconds")
    p.add_argument("--table", type=Path, help="only print the table of this cards.jsonl")
    p.add_argument("--compare", type=Path, nargs="+", help="only print the card x job table of these cards.jsonl "
                   "files, LongMedia and stock side by side (docs/lab/2026-12-03-comfyui-cards.md's layout)")
    p.add_argument("--comfy-arg", action="append", default=[], help="extra ComfyUI CLI argument for the card "
                   "processes, e.g. --comfy-arg=--disable-cuda-malloc (repeat for several)")
    p.add_argument("--latents", type=Path, help="save each main row's video latent here as "
                   "<card>gib_<format>_<seconds>s_<sampler>.pt, for bench/latent_diff.py (LongMedia under a small "
                   "card against stock on a large one)")
    p.add_argument("--kernels", action="store_true", help="record each main row's CUDA kernels (torch.profiler: "
                   "the 25 with the most device time, with calls and ms) into its row, to name the attention and "
                   "matmul kernels that ran")
    p.add_argument("--host-ram-gb", type=host_ram_value, nargs="*", default=[], metavar="GIB|all",
                   help="host RAM limits to run every card's rows under, e.g. `all 48 32 24 16` (all: the whole "
                        "machine; default: the whole machine only). Each limit gets its own card process, started "
                        "with the checkpoints' page cache dropped (bench/cards/host_balloon.py)")
    p.add_argument("--host-ram-limit", choices=["balloon", "cgroup"], default="balloon",
                   help="balloon (default): a process holds RAM until MemAvailable is the limit (what ComfyUI "
                        "reads); cgroup: a cgroup v2 child with memory.max (ComfyUI still sees the whole machine's "
                        "MemAvailable), falling back to the balloon where /sys/fs/cgroup is not writable")
    p.add_argument("--disk-read-gib", type=float, default=8.0, help="with --host-ram-gb: GiB of the checkpoint read "
                   "cold before the rows (bench/disk_read.py), recorded as each row's disk_read_gbps (0: skip)")
    p.add_argument("--host-table", type=Path, nargs="+", help="only print the host-RAM table of these cards.jsonl "
                   "files (bench/cards/host_table.py)")
    p.add_argument("--lora-rank", type=int, default=0, metavar="R",
                   help="a random LoRA of rank R on every block linear (longmedia.testing.tiny_lora at the bench's "
                        "dims, bf16), loaded by stock LoraLoaderModelOnly before the sampler (0: none)")
    p.add_argument("--host-row", default="{}", help=argparse.SUPPRESS)  # the parent's host fields, JSON
    p.add_argument("--child", type=float, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.extras = a.extras or a.extras_only
    a.oom_blocks = a.oom_blocks or a.blocks
    if a.smoke:
        a.cards, a.seconds, a.formats, a.blocks, a.steps = [16], [5], ["int8"], 2, 1
    return a


# ---------------------------------------------------------------- parent

def _gpu_and_comfyui() -> bool:
    import torch

    return torch.cuda.is_available() and bool(os.environ.get("LONGMEDIA_COMFYUI_ROOT"))


def main(argv=None) -> int:
    a = parse(argv)
    if a.table:
        print(tables(read_rows(a.table)))
        return 0
    if a.compare:
        print(compare([r for path in a.compare for r in read_rows(path)]))
        return 0
    if a.host_table:
        print(host_table([r for path in a.host_table for r in read_rows(path)]))
        return 0
    if a.child is not None:
        from .child import child

        return child(a)
    if not _gpu_and_comfyui():
        print("bench.cards: SKIPPED, it needs a CUDA GPU and a ComfyUI checkout (LONGMEDIA_COMFYUI_ROOT; on a GPU "
              "machine without network `. tools/gpu/bootstrap.sh`): every row runs ComfyUI's PromptExecutor on the device")
        return 0 if a.smoke else 2
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + a.budget_s
    t0 = time.perf_counter()
    gen = subprocess.run([sys.executable, "-m", "longmedia.testing.full_h3", str(a.models), "--blocks", str(a.blocks),
                          *[x for f in a.formats for x in ("--variant", f)]], cwd=REPO, capture_output=True, text=True,
                         check=False)
    print(f"checkpoints ({time.perf_counter() - t0:.0f} s): {gen.stdout.strip()} {gen.stderr[-2000:] if gen.returncode else ''}",
          flush=True)
    if gen.returncode:
        return gen.returncode
    if a.extras and a.oom_blocks != a.blocks:  # the injected-OOM rows' model
        gen = subprocess.run([sys.executable, "-m", "longmedia.testing.full_h3", str(a.models), "--blocks",
                              str(a.oom_blocks), "--variant", "int8"], cwd=REPO, capture_output=True, text=True,
                             check=False)
        print(f"OOM rows' checkpoint: {gen.stdout.strip()} {gen.stderr[-2000:] if gen.returncode else ''}", flush=True)
    if a.lora_rank:
        print(f"LoRA: {_bench_lora(a)}", flush=True)
    rows_file = a.out / ROWS_FILE
    disk_gbps = _disk_read(a) if a.host_ram_gb else None
    for card in a.cards:
        if time.time() > deadline - 30:
            print(f"card {card:g}: skipped, bench budget spent", flush=True)
            continue
        cmd = [sys.executable, "-P", "-m", "bench.cards", "--child", str(card), "--deadline", str(deadline),
               "--seconds", *map(str, a.seconds), "--formats", *a.formats, "--samplers", *a.samplers,
               "--blocks", str(a.blocks), "--steps", str(a.steps), "--out", str(a.out), "--models", str(a.models)]
        if a.extras:
            cmd += ["--extras", "--extras-steps", str(a.extras_steps), "--extras-seconds", str(a.extras_seconds),
                    "--oom-blocks", str(a.oom_blocks), "--oom-modes", *a.oom_modes]
            if a.extras_which:
                cmd += ["--extras-which", *a.extras_which]
        if a.extras_only:
            cmd.append("--extras-only")
        cmd += [f"--comfy-arg={x}" for x in a.comfy_arg] + ["--simulate", a.simulate, "--lora-rank", str(a.lora_rank)]
        if a.latents:
            cmd += ["--latents", str(a.latents)]
        if a.kernels:
            cmd.append("--kernels")
        try:
            ballast = _ballast(card) if a.simulate == "ballast" else None
        except RuntimeError as error:  # named: no ballast, no simulated card; the next card may still run
            print(f"card {card:g}: {error}", flush=True)
            continue
        try:
            for limit in a.host_ram_gb or [None]:
                if time.time() > deadline - 30:
                    print(f"card {card:g}, host RAM {_ram(limit)}: skipped, bench budget spent", flush=True)
                    continue
                _card_under_host_limit(a, card, limit, cmd, disk_gbps, deadline)
        finally:
            if ballast is not None:
                ballast.kill()
                ballast.wait()
    print(tables(read_rows(rows_file)))
    return 0


def _bench_lora(a) -> str:
    """Write the bench's random LoRA once (bf16 up/down, every block linear at the bench's dims)."""
    import torch

    from longmedia.testing.full_h3 import full_dims
    from longmedia.testing.tiny_lora import TinyLoraSpec, write_tiny_lora

    path = a.models / "loras" / bench_lora_name(a)
    if not path.is_file():
        t0 = time.perf_counter()
        write_tiny_lora(path, dims=full_dims(a.blocks), spec=TinyLoraSpec(rank=a.lora_rank), dtype=torch.bfloat16)
        return f"{path} written ({path.stat().st_size / GIB:.2f} GiB, {time.perf_counter() - t0:.0f} s)"
    return f"{path} ({path.stat().st_size / GIB:.2f} GiB, kept)"


def _ram(limit: float | None) -> str:
    return "all" if limit is None else f"{limit:g} GiB"


def _checkpoints(a) -> list[Path]:
    return [a.models / f"full_h3_{fmt}_{a.blocks}blocks.safetensors" for fmt in a.formats]


def _disk_read(a) -> float | None:
    """The first checkpoint's cold sequential read speed (GB/s), once before the host-RAM rows."""
    from bench.disk_read import read_speed

    path = next((p for p in _checkpoints(a) if p.is_file()), None)
    if path is None or a.disk_read_gib <= 0:
        return None
    result = read_speed(path, int(a.disk_read_gib * GIB))
    print(f"disk read: {result.gbps:.2f} GB/s ({result.bytes_read / GIB:.2f} GiB of {path.name} in "
          f"{result.seconds:.1f} s, page cache dropped: {result.dropped_cache})", flush=True)
    return round(result.gbps, 3)


def _host_limit(a, card: float, limit: float | None):
    """The host limit of one card process: (balloon process or None, cgroup folder or None, HostLimit). The
    checkpoints' page cache is dropped first, so every limit's rows start cold."""
    from bench.disk_read import drop_page_cache

    if a.host_ram_gb:
        for path in _checkpoints(a):
            if path.is_file():
                drop_page_cache(path)
    from .host_balloon import read_mem_available

    if limit is None:
        return None, None, HostLimit(mem_available_start_bytes=read_mem_available())
    if a.host_ram_limit == "cgroup":
        folder, why = make_cgroup(limit, f"longmedia_bench_{os.getpid()}")
        if folder is not None:
            return None, folder, HostLimit(host_ram_gib=limit, host_ram_limit="cgroup",
                                           mem_available_start_bytes=read_mem_available())
        print(f"card {card:g}, host RAM {_ram(limit)}: no cgroup ({why}); the RAM balloon instead", flush=True)
    balloon, host = start_balloon(limit, REPO)
    return balloon, None, host


def _card_under_host_limit(a, card: float, limit: float | None, cmd: list[str], disk_gbps: float | None,
                           deadline: float) -> None:
    """One card process (restarted past a row it died in) under one host RAM limit; the limit ends with it."""
    rows_file = a.out / ROWS_FILE
    try:
        balloon, cgroup, host = _host_limit(a, card, limit)
    except BalloonError as error:  # named: no balloon, no limit; the next limit may still run
        print(f"card {card:g}: {error}", flush=True)
        return
    host_row = {**host.as_row(), "disk_read_gbps": disk_gbps}
    where = f"card {card:g}" + (f", host RAM {_ram(limit)}" if a.host_ram_gb else "")
    try:
        for _ in range(len(grid(a)) + 1):  # a child that dies mid-row is restarted past that row
            try:
                proc = subprocess.run([*cmd, "--host-row", json.dumps(host_row)], cwd=REPO, check=False,
                                      timeout=max(60.0, deadline - time.time() + 30), env=comfy_process.child_env(REPO),
                                      preexec_fn=child_preexec(cgroup) if a.host_ram_gb else None)
            except subprocess.TimeoutExpired:
                raise  # as before: the bench's budget is spent
            except subprocess.SubprocessError as error:  # named: the move into the cgroup failed before exec
                print(f"{where}: the card process did not start ({error}); no rows at this limit", flush=True)
                break
            print(f"{where}: child exit {proc.returncode}", flush=True)
            missing = [c for c in grid(a) if c not in done_cells(read_rows(rows_file), card, limit, a.comfy_arg,
                                                                   a.lora_rank)]
            if proc.returncode == 0 or not missing or a.extras_only or time.time() > deadline - 30:
                break
            append_row(a.out, _lost_row(card, a, missing[0], proc.returncode, host))
            if len(missing) == 1 and not a.extras:  # nothing left for a new card process (a ComfyUI start saved)
                break
            print(f"{where}: the child died during {missing[0]}; restarting it for the {len(missing) - 1} cells "
                  "left", flush=True)
    finally:
        if balloon is not None:
            end_balloon(balloon, where)
        if cgroup is not None:
            remove_cgroup(cgroup)


BALLAST = """
import sys, torch
card = int(float(sys.argv[1]) * 2 ** 30)
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
hold = torch.empty(max(0, free - card), dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
print(f"BALLAST {hold.numel()} {free}", flush=True)
sys.stdin.read()
"""


def _ballast(card: float) -> subprocess.Popen:
    """A process holding every byte of device memory but `card` GiB (its own CUDA context included)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    proc = subprocess.Popen([sys.executable, "-c", BALLAST, str(card)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    line = proc.stdout.readline().split()
    if not line or line[0] != "BALLAST":
        proc.kill()
        raise RuntimeError(f"ballast for {card} GiB did not start: {line}")
    print(f"card {card:g}: ballast holds {int(line[1]) / GIB:.2f} GiB, {int(line[2]) / GIB:.2f} GiB left free", flush=True)
    return proc


def _lost_row(card: float, a, cell: Cell, exit_code: int, host: HostLimit | None = None) -> dict:
    """The row of a cell whose child process died before writing it (the cell is not run again); under a host RAM
    limit a SIGKILL is named as the kernel's OOM killer's likely work."""
    host = host or HostLimit()
    fields = CardFields(card_gib=card, blocks=a.blocks, steps=a.steps, width=JOB[0], height=JOB[1],
                        comfy_args=tuple(a.comfy_arg), host_ram_gib=host.host_ram_gib, lora_rank=a.lora_rank,
                        host_ram_limit=host.host_ram_limit)
    result = f"error: the card's child process died (exit {exit_code})"
    if exit_code == -9 and host.host_ram_gib is not None:
        result = f"host OOM: the card's child process was killed (exit -9) under {host.host_ram_gib:g} GiB host RAM"
    return cell.row(fields.parent_row(), result=result)
