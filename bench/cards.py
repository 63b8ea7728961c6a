"""End to end in real ComfyUI (PromptExecutor) under simulated 8/12/16/24 GiB cards: stock vs LongMedia auto.

On the lent GPU machine, after tools/gpu/bootstrap.sh:

    python bench/cards.py --smoke                      # 2 blocks, 1 step, one card: proves the script runs
    python bench/cards.py --blocks 2 --steps 2         # the table: 4 cards x 4 lengths x bf16/int8 x 2 samplers
    python bench/cards.py --cards 16 --formats int8 --seconds 14.4 --blocks 50 --steps 1   # full depth
    python bench/cards.py --cards 16 --formats int8 --seconds 14.4 --blocks 50 --extras-only \
        --models /tmp/lm50                             # issue 14's extras alone (~5 min, bench/_cards_extras.py)

The model is a full-width random-weight H3 (`python -m longmedia.testing.full_h3`, drawn on the GPU)
with `--blocks` DiT blocks, loaded through UNETLoader. Each card runs in its own child process that
starts ComfyUI in main.py's order (Dynamic VRAM on). `--simulate ballast` (default): a ballast process
first takes all device memory but the card, so torch and comfy-aimdo both meet the card's real limit.
`--simulate reserve`: ComfyUI gets `--reserve-vram <H200 total - card>` (also comfy-aimdo's headroom)
and torch `set_per_process_memory_fraction(card / total)`; comfy-aimdo's own allocations are then not
hard-capped (the first GPU run went 2.6 GiB past a 16 GiB card that way). Every row is one prompt through ComfyUI's
`PromptExecutor`: UNETLoader -> MiniMaxH3SigmaShift -> CFGGuider (cfg 1: one model call per step) ->
SamplerCustomAdvanced (stock) or LongMediaBenchSampler (LongMedia's `run_sampler`, PlanRequest() =
auto, the card's DeviceProfile; see bench/_cards_nodes.py). Models are unloaded between rows.
Process peak = this process's device memory from NVML, sampled every 4 ms (comfy-aimdo's VBAR pages and
cast buffers included); torch peak = torch.cuda.max_memory_allocated. Rows go to OUT/cards.jsonl as
they finish; the table is printed at the end (and by `--table OUT/cards.jsonl`; `--compare OUT/cards.jsonl ...`
prints the card x job grid with LongMedia and stock side by side, bench/_cards_tables.py).

`--extras` (`--extras-only`: nothing else) adds issue 14's checks on the 16 GiB card, INT8, each a row
with `"extra": true`, a `label`, `check` (pass / fail) and `detail`, printed as a second table "extras":
injected OOM per phase (normal and low_vram, on the `--oom-blocks` model at 5 s), three seed-only
reruns (same boundary snapshot and plan), an interrupt mid step 1 then a rerun (memory back, checksum
equal to the fresh run), the 14.4 s job segmented into 3 passes (segment 3's s/step within 5 % of
segment 1's, rows like for like), attention_mode sol / scheduled_sol; see bench/_cards_extras.py and
bench/_cards_checks.py. `--extras-which` runs a subset. A LongMedia row refused before any GPU work with a
segment length (LongMediaInputError) is followed by the same job segmented as advised (`longmedia_advised`);
a card's child that dies mid-row is restarted past that row, and a rerun into the same `--out` resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import _cards_probes
from _cards_checks import EXTRAS
from _cards_measure import measure
from _cards_prompt import CONTROLS, CONTROLS_HELP, JOB, _Server, base_sampler, prompt, sampler_name  # noqa: F401  (prompt and _Server: the child's, and the tests')
from _cards_tables import compare, read_rows, tables

REPO = Path(__file__).resolve().parents[1]
GIB = 1024 ** 3


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cards", type=float, nargs="*", default=[8, 12, 16, 24], help="simulated card sizes, GiB")
    p.add_argument("--seconds", type=float, nargs="*", default=[5, 10, 14.4, 20])
    p.add_argument("--formats", nargs="*", default=["int8", "bf16"], choices=["int8", "bf16"])
    p.add_argument("--samplers", nargs="*", default=["longmedia", "stock"], type=sampler_name,
                   help="longmedia, stock, or a control; name#N runs that sampler again in the same card process, "
                        "as its own row (stock stock#2: is stock the same twice?). " + CONTROLS_HELP)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--extras", action="store_true", help="on the 16 GiB card, INT8 (bench/_cards_extras.py): "
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
                   "files, LongMedia and stock side by side (docs/PERFORMANCE.md's layout)")
    p.add_argument("--comfy-arg", action="append", default=[], help="extra ComfyUI CLI argument for the card "
                   "processes, e.g. --comfy-arg=--disable-cuda-malloc (repeat for several)")
    p.add_argument("--latents", type=Path, help="save each main row's video latent here as "
                   "<card>gib_<format>_<seconds>s_<sampler>.pt, for bench/latent_diff.py (LongMedia under a small "
                   "card against stock on a large one)")
    p.add_argument("--kernels", action="store_true", help="record each main row's CUDA kernels (torch.profiler: "
                   "the 25 with the most device time, with calls and ms) into its row, to name the attention and "
                   "matmul kernels that ran")
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
    if a.child is not None:
        return child(a)
    if not _gpu_and_comfyui():
        print("cards.py: SKIPPED, it needs a CUDA GPU and a ComfyUI checkout (LONGMEDIA_COMFYUI_ROOT; on the lent GPU "
              "machine `. tools/gpu/bootstrap.sh`): every row runs ComfyUI's PromptExecutor on the device")
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
    rows_file = a.out / "cards.jsonl"
    for card in a.cards:
        if time.time() > deadline - 30:
            print(f"card {card:g}: skipped, bench budget spent", flush=True)
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(card), "--deadline", str(deadline),
               "--seconds", *map(str, a.seconds), "--formats", *a.formats, "--samplers", *a.samplers,
               "--blocks", str(a.blocks), "--steps", str(a.steps), "--out", str(a.out), "--models", str(a.models)]
        if a.extras:
            cmd += ["--extras", "--extras-steps", str(a.extras_steps), "--extras-seconds", str(a.extras_seconds),
                    "--oom-blocks", str(a.oom_blocks), "--oom-modes", *a.oom_modes]
            if a.extras_which:
                cmd += ["--extras-which", *a.extras_which]
        if a.extras_only:
            cmd.append("--extras-only")
        cmd += [f"--comfy-arg={x}" for x in a.comfy_arg] + ["--simulate", a.simulate]
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
            for _ in range(len(grid(a)) + 1):  # a child that dies mid-row is restarted past that row
                proc = subprocess.run(cmd, cwd=REPO, check=False, timeout=max(60.0, deadline - time.time() + 30))
                print(f"card {card:g}: child exit {proc.returncode}", flush=True)
                missing = [c for c in grid(a) if c not in _done_cells(read_rows(rows_file), card)]
                if proc.returncode == 0 or not missing or a.extras_only or time.time() > deadline - 30:
                    break
                _append(a.out, _lost_row(card, a, *missing[0], proc.returncode))
                print(f"card {card:g}: the child died during {missing[0]}; restarting it for the "
                      f"{len(missing) - 1} cells left", flush=True)
        finally:
            if ballast is not None:
                ballast.kill()
                ballast.wait()
    print(tables(read_rows(rows_file)))
    return 0


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


_ADVICE = re.compile(r"set Setup's segment_seconds to ([0-9.]+)")


def advised_segment_seconds(row: dict) -> float | None:
    """The segment length a LongMedia refusal (LongMediaInputError before any GPU work) tells the user to set."""
    if row.get("sampler") != "longmedia" or "LongMediaInputError" not in (row.get("error") or ""):
        return None
    found = _ADVICE.search(row["error"])
    return float(found.group(1)) if found else None


def grid(a) -> list[tuple[str, float, str]]:
    """The main table's cells of one card, in run order: (format, seconds, sampler)."""
    return [(f, s, smp) for f in a.formats for s in a.seconds for smp in a.samplers]


def _done_cells(rows: list[dict], card: float) -> set[tuple[str, float, str]]:
    return {(r["format"], r["seconds"], r["sampler"]) for r in rows
            if r.get("card_gib") == card and not r.get("extra") and "sampler" in r}


def cell_row(base: dict, fmt: str, seconds: float, sampler: str, label: str | None = None, **extra) -> dict:
    """A main-table row before it runs: the card's fields (`base`), the cell, its label (the sampler's name unless
    told) and seed 0."""
    from longmedia.h3.lattice import frames_for_seconds

    return {**base, "format": fmt, "seconds": seconds, "frames": frames_for_seconds(seconds), "sampler": sampler,
            "label": label or sampler, "seed": 0, **extra}


def _lost_row(card: float, a, fmt: str, seconds: float, sampler: str, exit_code: int) -> dict:
    """The row of a cell whose child process died before writing it (the cell is not run again)."""
    base = {"card_gib": card, "blocks": a.blocks, "steps": a.steps, "width": JOB[0], "height": JOB[1]}
    return cell_row(base, fmt, seconds, sampler, result=f"error: the card's child process died (exit {exit_code})")


# ---------------------------------------------------------------- child (one card)

def child(a) -> int:
    sys.path.insert(0, str(REPO / "tools" / "gpu"))
    sys.path.insert(1, str(REPO))
    import comfy_process  # before torch: comfy-aimdo initialises first, as in main.py

    card = a.child
    total = _nvml_total()
    reserve_gib = max(0.0, (total - card * GIB) / GIB) if a.simulate == "reserve" else None
    start = comfy_process.start_comfyui(
        (["--reserve-vram", f"{reserve_gib:.3f}"] if reserve_gib is not None else []) + list(a.comfy_arg))
    import torch

    if a.simulate == "reserve":
        torch.cuda.set_per_process_memory_fraction(min(1.0, card * GIB / total), 0)
    cap = _cap_enforced(torch, card)
    comfy_process.load_builtin_nodes()
    sys.path.insert(0, str(REPO / "bench"))
    import _cards_nodes
    import comfy.model_management as mm
    import comfy.utils
    import execution
    import folder_paths


    _cards_nodes.register()
    folder_paths.add_model_folder_path("diffusion_models", str(a.models))
    server = _Server()
    steps_at: list[float] = []

    from longmedia.comfy.memory_facts import aimdo_vram_usage, vbar_resident_bytes

    step_memory: list[dict] = []

    def hook(value, total_steps, preview, prompt_id=None, node_id=None):
        steps_at.append(time.perf_counter())
        # where the process's device memory sits at each step's end: torch's allocated and reserved bytes,
        # comfy-aimdo's own VRAM (VBAR pages + cast buffers) and the weights resident through its VBARs
        step_memory.append({"torch_allocated": int(torch.cuda.memory_allocated()),
                            "torch_reserved": int(torch.cuda.memory_reserved()),
                            "aimdo_usage": aimdo_vram_usage(), "vbar_resident": vbar_resident_bytes(),
                            "process": memory.process_used()})
        mm.throw_exception_if_processing_interrupted()

    comfy.utils.set_progress_bar_global_hook(hook)
    executor = execution.PromptExecutor(server, cache_type=execution.CacheType.CLASSIC,
                                        cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})
    memory = comfy_process.DeviceMemory()
    base = {"card_gib": card, "blocks": a.blocks, "steps": a.steps, "width": JOB[0], "height": JOB[1],
            "device": start.device_name, "aimdo_enabled": start.aimdo_enabled, "alloc_conf": start.alloc_conf,
            "simulate": a.simulate, "reserve_vram_gib": reserve_gib, "cap_enforced": cap,
            "free_at_start_bytes": int(torch.cuda.mem_get_info()[0]),
            "comfy_total_mib": round(mm.get_total_memory(mm.get_torch_device()) / 2 ** 20)}
    def run(row: dict, p: dict, prompt_id: str, *, unload: bool = True, kernels: bool = False) -> dict:
        """Run prompt `p` through the PromptExecutor and measure it into `row` (models unloaded first unless
        `unload` is False: a rerun finds what the previous prompt left loaded, as in a user's session); `kernels`:
        the CUDA kernels that ran, under torch.profiler (`_cards_probes.kernel_table`)."""
        if unload:
            mm.unload_all_models()
        # as ComfyUI's prompt worker does between prompts: an OOM's traceback cycle keeps the failed
        # prompt's activations alive until the cyclic GC runs (the second GPU run lost 12.5 GiB that way)
        gc.collect()
        mm.soft_empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        memory.reset()
        steps_at.clear()
        step_memory.clear()
        server.events.clear()
        t0 = time.perf_counter()
        with _cards_probes.kernel_table(row) if kernels else contextlib.nullcontext():
            executor.execute(p, prompt_id, {"client_id": "bench"}, ["sink"])
            torch.cuda.synchronize()
        row.update(measure(executor, server, steps_at, memory, torch, mm, t0))
        row["step_memory"] = list(step_memory)
        row["torch_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved())
        return row

    def reading() -> dict:
        """Device memory with no prompt running, after ComfyUI's prompt-worker clean-up (gc, soft_empty_cache)."""
        gc.collect()
        mm.soft_empty_cache()
        torch.cuda.synchronize()
        return {"torch_allocated": int(torch.cuda.memory_allocated()), "process": memory.process_used(),
                "aimdo_usage": aimdo_vram_usage(), "vbar_resident": vbar_resident_bytes()}

    def write(row: dict) -> None:
        _append(a.out, row)
        print(json.dumps({k: row.get(k) for k in ("card_gib", "format", "seconds", "label", "result", "s_per_step",
                                                   "process_peak_bytes", "torch_peak_bytes", "check")}), flush=True)

    if a.latents:
        a.latents.mkdir(parents=True, exist_ok=True)
    done = _done_cells(read_rows(a.out / "cards.jsonl"), card)  # a restarted child skips the cells it has rows for
    cells = [] if a.extras_only else [c for c in grid(a) if c not in done]
    for fmt, seconds, sampler in cells:
        row = cell_row(base, fmt, seconds, sampler)
        if time.time() > a.deadline - 20:
            row["result"] = "not run (bench budget spent)"
            _append(a.out, row)
            continue
        unet = f"full_h3_{fmt}_{a.blocks}blocks.safetensors"
        kind = base_sampler(sampler)  # stock#2 runs stock again
        attention, extra = CONTROLS.get(kind, ("auto", {}))
        if a.latents:
            extra = {**extra, "latent_path": str(a.latents / f"{card:g}gib_{fmt}_{seconds:g}s_{sampler}.pt")}
        write(run(row, prompt(unet, seconds, a.steps, 42, kind, card, attention, a.simulate, **extra),
                  f"{sampler}-{fmt}-{seconds}", kernels=a.kernels))
        advised = advised_segment_seconds(row)
        if advised and time.time() < a.deadline - 20:  # the refusal's own fix, as a user would apply it in Setup
            seg = cell_row(base, fmt, seconds, "longmedia_advised", f"longmedia, as advised: segment_seconds {advised:g}",
                           segment_seconds=advised)
            write(run(seg, prompt(unet, seconds, a.steps, 42, kind, card, "auto", a.simulate,
                                  job_seconds=seconds, segment_seconds=advised), f"advised-{fmt}-{seconds}"))
    if a.extras and card == 16 and "int8" in a.formats:
        import _cards_extras

        _cards_extras.run_extras(_cards_extras.Bench(a=a, card=card, base=base, run=run, reading=reading,
                                                     write=write, steps_at=steps_at, prompt=prompt))
    memory.close()
    return 0


def _append(out_dir: Path, row: dict) -> None:
    with open(out_dir / "cards.jsonl", "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def _nvml_total() -> int:
    import pynvml

    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)


def _cap_enforced(torch, card: float) -> bool:
    """Does torch's allocator refuse more than the card (the memory fraction, or the ballast)?"""
    try:
        t = torch.empty(int((card + 0.5) * GIB), dtype=torch.uint8, device="cuda")
        del t
        torch.cuda.empty_cache()
        return False
    except torch.OutOfMemoryError:
        return True


if __name__ == "__main__":
    raise SystemExit(main())
