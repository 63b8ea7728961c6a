"""The long-job bench's entry point: arguments, the plan (always, on the CPU), and the parent of a GPU run (the
checkpoint, the ballast, the stage's own process under its wall-time budget)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from longmedia.units import GIB

from ..cards.host_balloon import child_preexec, end_balloon, host_ram_value
from . import vae_files
from .job import FULL, SMOKE, STAGES, bench_job, job_plan
from .tables import PLAN_FILE, ROWS_FILE, read_rows, table

REPO = Path(__file__).resolve().parents[2]
DESCRIPTION = "A long H3 job at full depth, stage by stage in separate processes, under a real card limit."
LENT_RAM_GIB = 128.0     # the lent single-H200 machine's RAM (what --smoke plans the GPU run with)
PASSES_PER_PROCESS = 3   # about 400 s per process on an H200 at full depth (see the package docstring)
WHOLE_STAGE_BUDGET_S = 900.0   # a whole DiT stage (7 passes) on an H200: about 400 s (docs/lab long-job plan)


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.long_job", description=DESCRIPTION)
    p.add_argument("--smoke", action="store_true", help="CPU dry run: the full job's plan and, when "
                   "LONGMEDIA_COMFYUI_ROOT is set, every stage on the tiny checkpoint (64x64, 2 s in 1 s segments)")
    p.add_argument("--out", type=Path, default=Path("/tmp/longmedia_long_job"),
                   help="the stages' latents and rows (kept between device calls while the machine stays warm); "
                        "the rows, the plan and the table are also copied to $OUT when it is set")
    p.add_argument("--models", type=Path, default=Path("/tmp/longmedia_models"))
    p.add_argument("--blocks", type=int, default=50, help="DiT blocks of the random INT8 H3 (50: full depth)")
    p.add_argument("--card", type=float, default=16.0, help="the card limit the ballast leaves, GiB")
    p.add_argument("--ram-gib", type=float, default=None, help="RAM the plan assumes (default: this machine's; "
                   f"--smoke: {LENT_RAM_GIB:g}, the lent H200 machine's)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--stage", choices=STAGES, help="run this stage (its input latent must be in --out)")
    which.add_argument("--stages", choices=STAGES, nargs="+", help="run these stages in order, each whole in its own "
                   "process (a machine without a per-call limit; on the lent one, under tools/gpu/hold.sh)")
    p.add_argument("--passes", type=int, nargs=2, metavar=("FIRST", "STOP"), default=None,
                   help="run passes [FIRST, STOP) of the stage; a later process continues from the saved latents "
                        f"(default: all; the plan prints the calls at {PASSES_PER_PROCESS} passes per process)")
    p.add_argument("--seeded-input", action="store_true",
                   help="a stage whose input latent (the previous stage's) is not in --out starts from a seeded "
                        "random latent of that shape instead (the decode: of Hi-Res's output, the Refiner's shape), "
                        "and its rows say so (seeded_input): a stage's time and memory without the stages before it; "
                        "its output is no video")
    p.add_argument("--sampler-steps", type=_steps, default=None, metavar="N",
                   help=f"the Sampler stage's steps at cfg 1 (default {FULL.sampler_steps}; 8 for the turbo "
                        "schedule); Hi-Res and the Refiner keep theirs")
    p.add_argument("--prepare", action="store_true", help="only write the checkpoint (its own device call)")
    p.add_argument("--stage-budget-s", type=float, default=550.0, help="wall-time limit of one stage process")
    p.add_argument("--host-ram-gb", type=host_ram_value, default=None, metavar="GIB",
                   help="run the stages under this host RAM: a RAM balloon holds the rest until MemAvailable is the "
                        "limit (bench/cards/host_balloon.py), the checkpoint's page cache dropped first; the plan "
                        "is then made for a machine with this RAM (default: all, no balloon)")
    p.add_argument("--host-row", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--table", type=Path, help="only print the table of this long_job.jsonl")
    p.add_argument("--child", choices=(*STAGES, "vaes"), help=argparse.SUPPRESS)
    p.add_argument("--unet", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _steps(text: str) -> int:
    """--sampler-steps' argument type: a step count from 1 to 100."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a step count from 1 to 100") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: a step count from 1 to 100")
    return value


def _ram_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / GIB


def print_plan(a, job, checkpoint: str | None = None) -> dict:
    """The job's plan on the card (LongMedia's planners, no GPU): passes, rows, modes, RAM, estimated times; of
    `checkpoint`'s own profile once it is written, else of the INT8 preset."""
    plan = job_plan(job, a.card, a.ram_gib or _ram_gib(), a.blocks, checkpoint)
    segs = job.segments()
    print(f"job: {job.width}x{job.height}, {job.seconds:g} s -> {segs.pixel_frames} frames in {segs.count} segments "
          f"(segment_seconds {job.segment_seconds:g}, context {job.context_frames}); Hi-Res x{job.hires_scale:g}; "
          f"steps per pass: Sampler {job.sampler_steps}, Hi-Res {job.hires_steps}, Refiner {job.refiner_steps}; "
          f"{a.blocks} blocks INT8 on a {a.card:g} GiB card; weights {next(iter(plan.values()))['model']['weight_bytes'] / GIB:.2f} GiB "
          f"({checkpoint or 'the INT8 preset'})", flush=True)
    for stage, row in plan.items():
        rows = f", {row['seq_len']} rows per pass ({row['width']}x{row['height']}, {row['pass_frames']} frames), " \
               f"{row['memory_mode']}, predicted peak {row['predicted_peak_bytes'] / GIB:.2f} GiB" if "seq_len" in row else ""
        print(f"  {stage}: {row['plan_stage']}: RAM {row['ram_need_bytes'] / GIB:.2f} GiB, VRAM "
              f"{row['vram_need_bytes'] / GIB:.2f} / {row['vram_usable_bytes'] / GIB:.2f} GiB, about "
              f"{row['estimated_s']:.0f} s on a card of this class{rows}", flush=True)
    return plan


def calls(a, job) -> list[str]:
    """The commands that make the whole table: all stages in one (where a command may run for about 25 min), or
    the device calls of at most PASSES_PER_PROCESS passes each (where a call may run for 10 min)."""
    count = job.segments().count
    out = [f"python -m bench.long_job --stages {' '.join(STAGES)} --blocks {a.blocks} --out {a.out} "
           f"--stage-budget-s {WHOLE_STAGE_BUDGET_S:g}",
           f"python -m bench.long_job --prepare --blocks {a.blocks}"]
    for stage in STAGES[:3]:
        for first in range(0, count, PASSES_PER_PROCESS):
            stop = min(count, first + PASSES_PER_PROCESS)
            out.append(f"python -m bench.long_job --stage {stage} --passes {first} {stop} --out {a.out}")
    out.append(f"python -m bench.long_job --stage decode --out {a.out}")
    return out


def _gpu_and_comfyui() -> bool:
    import torch

    return torch.cuda.is_available() and bool(os.environ.get("LONGMEDIA_COMFYUI_ROOT"))


def main(argv=None) -> int:
    a = parse(argv)
    if a.table:
        plan_path = a.table.parent / PLAN_FILE         # a run's folder; a kept copy names it after its rows
        if not plan_path.is_file():
            plan_path = a.table.with_name(f"{a.table.stem}-plan.json")
        print(table(read_rows(a.table), json.loads(plan_path.read_text()) if plan_path.is_file() else None))
        return 0
    if a.child == "vaes":
        from .vae_files import main as write_vaes

        return write_vaes(a)
    if a.child:
        from .stage import stage_main

        return stage_main(a)
    if a.smoke:
        return smoke(a)
    job = bench_job(False, a.sampler_steps)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.host_ram_gb is not None and a.ram_gib is None:
        a.ram_gib = a.host_ram_gb          # the plan of a machine with that RAM
    if not _gpu_and_comfyui():
        (a.out / PLAN_FILE).write_text(json.dumps(print_plan(a, job), indent=1))     # of the INT8 preset
        print("bench.long_job: the stages need a CUDA GPU and a ComfyUI checkout (LONGMEDIA_COMFYUI_ROOT; on the lent "
              "GPU machine `. tools/gpu/bootstrap.sh`). The calls that make the table:\n  " + "\n  ".join(calls(a, job)))
        return 2
    decode_only = not a.prepare and {a.stage} | set(a.stages or ()) <= {"decode", None}
    if decode_only and not (a.models / checkpoint_name(a)).is_file():
        unet = ""                # the decode alone writes no DiT checkpoint: the plan is the INT8 preset's
        plan = print_plan(a, job)
    else:
        unet = checkpoint(a)
        if unet is None:
            return 1
        plan = print_plan(a, job, str(a.models / unet))     # the checkpoint that runs, not the preset
    (a.out / PLAN_FILE).write_text(json.dumps(plan, indent=1))
    if a.prepare:
        return 0
    if a.stage is None and not a.stages:
        print("name a stage (--stage) or stages (--stages); the calls that make the table:\n  "
              + "\n  ".join(calls(a, job)))
        return 2
    from ..cards.entry import _ballast

    ballast = _ballast(a.card)
    try:
        balloon = _host_limit(a, unet)
    except BaseException:
        ballast.kill()
        ballast.wait()
        raise
    try:
        code = run_stages(a, unet)
    finally:
        ballast.kill()
        ballast.wait()
        if balloon is not None:
            end_balloon(balloon, f"host RAM {a.host_ram_gb:g} GiB")
    text = table(read_rows(a.out / ROWS_FILE), plan)
    print(text)
    copy_out(a, text)
    return code


def _host_limit(a, unet: str):
    """With --host-ram-gb: the checkpoint's page cache dropped (the stages start cold) and the RAM balloon started;
    its figures go to every stage's rows (a.host_row). Returns the balloon process, or None without a limit."""
    from bench.disk_read import drop_page_cache

    from ..cards.host_balloon import read_mem_available, start_balloon

    if a.host_ram_gb is None:
        a.host_row = json.dumps({"host_ram_gib": None, "mem_available_start_bytes": read_mem_available()})
        return None
    if unet and (a.models / unet).is_file():
        drop_page_cache(a.models / unet)
    balloon, host = start_balloon(a.host_ram_gb, REPO)
    a.host_row = json.dumps(host.as_row())
    return balloon


def copy_out(a, text: str) -> None:
    """The rows, the plan and the table into $OUT (the device tool brings that folder back), when it is set."""
    import shutil

    dest = os.environ.get("OUT")
    if not dest or Path(dest).resolve() == a.out.resolve():
        return
    for name in (ROWS_FILE, PLAN_FILE):
        if (a.out / name).is_file():
            shutil.copyfile(a.out / name, Path(dest) / name)
    (Path(dest) / "long_job_table.md").write_text(text + "\n")


def checkpoint_name(a) -> str:
    from longmedia.testing.full_h3 import default_filename

    return default_filename("int8", a.blocks)


def checkpoint(a) -> str | None:
    """The random full-width INT8 H3 with --blocks blocks in --models (written once; a warm machine keeps it)."""
    name = checkpoint_name(a)
    if (a.models / name).is_file():
        return name
    t0 = time.perf_counter()
    gen = subprocess.run([sys.executable, "-m", "longmedia.testing.full_h3", str(a.models), "--blocks", str(a.blocks),
                          "--variant", "int8"], cwd=REPO, capture_output=True, text=True, check=False)
    print(f"checkpoint ({time.perf_counter() - t0:.0f} s): {gen.stdout.strip()} {gen.stderr[-2000:]}", flush=True)
    return name if gen.returncode == 0 else None


def run_stages(a, unet: str) -> int:
    """--stage (its --passes), or each of --stages whole, in order; the first stage that fails ends the run."""
    if a.stage is not None:
        return run_stage(a, unet)
    for stage in a.stages:
        a.stage, a.passes = stage, None
        code = run_stage(a, unet)
        if code != 0:
            return code
    return 0


def run_stage(a, unet: str) -> int:
    """The stage in its own process (ComfyUI started there as main.py does), killed past --stage-budget-s."""
    from ..cards import comfy_process

    passes = a.passes or (0, 0)
    if a.stage == "decode" and not a.smoke and vae_files.missing(a.models):
        code = subprocess.run([sys.executable, "-P", "-m", "bench.long_job", "--child", "vaes", "--models",
                               str(a.models)], cwd=REPO, check=False, env=comfy_process.child_env(REPO)).returncode
        if code != 0:
            print(f"stage decode: writing the VAE files failed (exit {code})", flush=True)
            return code
    cmd = [sys.executable, "-P", "-m", "bench.long_job", "--child", a.stage, "--passes", *map(str, passes),
           "--out", str(a.out), "--models", str(a.models), "--blocks", str(a.blocks), "--card", str(a.card),
           "--unet", unet, "--host-row", a.host_row] + (["--smoke"] if a.smoke else []) + (
               ["--seeded-input"] if a.seeded_input else []) + (
               ["--sampler-steps", str(a.sampler_steps)] if a.sampler_steps is not None else [])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, check=False, timeout=a.stage_budget_s, env=comfy_process.child_env(REPO),
                              preexec_fn=child_preexec(None) if a.host_ram_gb is not None else None)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = 124
        print(f"stage {a.stage}: past its {a.stage_budget_s:g} s budget, stopped (rows so far are kept)", flush=True)
    print(f"stage {a.stage} passes {passes[0]}..{passes[1] or 'end'}: exit {code} after "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return code


def smoke(a) -> int:
    """The full job's plan (no GPU needed), then, with a ComfyUI checkout, every stage on the tiny checkpoint on
    the CPU: the sampler in two processes (passes 0..1, then the rest), then Hi-Res, Refiner and the decode."""
    a.ram_gib = a.ram_gib or LENT_RAM_GIB
    plan = print_plan(a, FULL)
    assert FULL.segments().count == 7 and all(row["fits"] for row in plan.values()), plan
    print("the calls that make the GPU table:\n  " + "\n  ".join(calls(a, FULL)), flush=True)
    if not os.environ.get("LONGMEDIA_COMFYUI_ROOT"):
        print("bench.long_job --smoke: the plan only (no LONGMEDIA_COMFYUI_ROOT: the stages were not run)")
        return 0
    from longmedia.testing.tiny_h3 import write_tiny_h3

    if a.out == parse([]).out:   # a fresh folder: the smoke never continues a GPU run's latents
        a.out = Path(tempfile.mkdtemp(prefix="long_job_smoke_"))
    a.models = a.out / "models"
    a.models.mkdir(parents=True, exist_ok=True)
    unet = write_tiny_h3(a.models, variant="fp32").name
    count = SMOKE.segments().count
    for stage, passes in (("sampler", (0, 1)), ("sampler", (1, count)), ("hires", None), ("refiner", None),
                          ("decode", None)):
        a.stage, a.passes = stage, passes
        if run_stage(a, unet) != 0:
            print(table(read_rows(a.out / ROWS_FILE)))
            return 1
    print(table(read_rows(a.out / ROWS_FILE)))
    print(f"bench.long_job --smoke: every stage ran on the CPU; rows in {a.out / ROWS_FILE}")
    return 0
