"""One card's process of the card bench: ComfyUI started in main.py's order (comfy-aimdo before torch), the
bench's nodes registered, then the card's main-table rows through ComfyUI's PromptExecutor (a refused LongMedia
row followed by its advised rerun), then, on the 16 GiB card, the extras."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import time

from longmedia.units import GIB, MIB

from . import comfy_process  # before torch: comfy-aimdo initialises first, as in main.py
from .cells import advised_segment_seconds, bench_lora_name, grid
from .host_memory import HostMemory, calls_per_step
from .measure import executor_class, measure
from .prompts import CONTROLS, JOB, Server, base_sampler, execute, prompt
from .rows import ROWS_FILE, CardFields, Cell, append_row, done_cells, read_rows
from .step_clock import StepClock


def child(a) -> int:
    """One card's rows (`a.child` GiB), then its extras; started by the parent through `comfy_process.child_env`."""
    card = a.child
    total = _nvml_total()
    reserve_gib = max(0.0, (total - card * GIB) / GIB) if a.simulate == "reserve" else None
    start = comfy_process.start_comfyui(
        (["--reserve-vram", f"{reserve_gib:.3f}"] if reserve_gib is not None else []) + list(a.comfy_arg))
    import torch

    if a.simulate == "reserve":
        torch.cuda.set_per_process_memory_fraction(min(1.0, card * GIB / total), 0)
    cap = _cap_enforced(torch, card)
    from .probes import kernel_table  # imports torch (through the product): only after ComfyUI chose its allocator

    comfy_process.load_builtin_nodes()
    import comfy.model_management as mm
    import comfy.utils
    import execution
    import folder_paths

    from . import nodes

    nodes.register()
    folder_paths.add_model_folder_path("diffusion_models", str(a.models))
    folder_paths.add_model_folder_path("loras", str(a.models / "loras"))
    lora = bench_lora_name(a) if a.lora_rank else ""
    clock = StepClock()  # device-timed steps (CUDA events at the sample node's start and at each progress hook)
    server = Server(on_sample_start=clock.start)
    steps_at: list[float] = []

    from longmedia.comfy.host.memory import aimdo_vram_usage, pinned_ram_bytes, vbar_resident_bytes

    step_memory: list[dict] = []

    def hook(value, total_steps, preview, prompt_id=None, node_id=None):
        steps_at.append(time.perf_counter())
        clock.step()
        host.step()  # read_bytes at each step's end
        # where the process's device memory sits at each step's end: torch's allocated and reserved bytes,
        # comfy-aimdo's own VRAM (VBAR pages + cast buffers) and the weights resident through its VBARs
        step_memory.append({"torch_allocated": int(torch.cuda.memory_allocated()),
                            "torch_reserved": int(torch.cuda.memory_reserved()),
                            "aimdo_usage": aimdo_vram_usage(), "vbar_resident": vbar_resident_bytes(),
                            "process": memory.process_used()})
        mm.throw_exception_if_processing_interrupted()

    comfy.utils.set_progress_bar_global_hook(hook)
    executor = executor_class(execution)(server, cache_type=execution.CacheType.CLASSIC,
                                         cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})
    memory = comfy_process.DeviceMemory()
    host = HostMemory(pinned=pinned_ram_bytes)  # RSS split, MemAvailable, pinned RAM and disk reads (every 0.2 s)
    host_row = json.loads(a.host_row)  # the parent's host RAM limit and disk speed
    base = CardFields(card_gib=card, blocks=a.blocks, steps=a.steps, width=JOB[0], height=JOB[1],
                      device=start.device_name, aimdo_enabled=start.aimdo_enabled, alloc_conf=start.alloc_conf,
                      simulate=a.simulate, reserve_vram_gib=reserve_gib, cap_enforced=cap,
                      free_at_start_bytes=int(torch.cuda.mem_get_info()[0]),
                      comfy_total_mib=round(mm.get_total_memory(mm.get_torch_device()) / MIB),
                      comfy_args=tuple(a.comfy_arg), lora_rank=a.lora_rank, **host_row).as_row()
    prompts_run = itertools.count(1)  # a row's position among the prompts of its card process (stock's first differs)

    def run(row: dict, p: dict, prompt_id: str, *, unload: bool = True, kernels: bool = False) -> dict:
        """Run prompt `p` through the PromptExecutor and measure it into `row` (models unloaded first unless
        `unload` is False: a rerun finds what the previous prompt left loaded, as in a user's session); `kernels`:
        the CUDA kernels that ran, under torch.profiler (`probes.kernel_table`)."""
        if unload:
            mm.unload_all_models()
        # as ComfyUI's prompt worker does between prompts: an OOM's traceback cycle keeps the failed
        # prompt's activations alive until the cyclic GC runs (the second GPU run lost 12.5 GiB that way)
        gc.collect()
        mm.soft_empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        memory.reset()
        host.reset()
        steps_at.clear()
        clock.reset()
        step_memory.clear()
        server.events.clear()
        t0 = time.perf_counter()
        executor.last_error = None
        with kernel_table(row) if kernels else contextlib.nullcontext():
            execute(executor, p, prompt_id, row.get("sampler", ""))  # a repeat frees the node cache first
            torch.cuda.synchronize()
        row.update(measure(executor, server, steps_at, memory, torch, mm, t0, clock))
        row.update(host.fields(calls_per_step(p)))
        row["process_position"] = next(prompts_run)
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
        append_row(a.out, row)
        print(json.dumps({k: row.get(k) for k in ("card_gib", "format", "seconds", "label", "result", "s_per_step",
                                                   "process_peak_bytes", "torch_peak_bytes", "check", "host_ram_gib",
                                                   "rss_peak_bytes", "disk_read_per_call_bytes")}), flush=True)

    if a.latents:
        a.latents.mkdir(parents=True, exist_ok=True)
    # a restarted child skips the cells it has rows for (at this host RAM limit and these ComfyUI arguments)
    done = done_cells(read_rows(a.out / ROWS_FILE), card, host_row.get("host_ram_gib"), a.comfy_arg, a.lora_rank)
    cells = [] if a.extras_only else [c for c in grid(a) if c not in done]
    for cell in cells:
        fmt, seconds, sampler = cell.format, cell.seconds, cell.sampler
        row = cell.row(base)
        if time.time() > a.deadline - 20:
            row["result"] = "not run (bench budget spent)"
            append_row(a.out, row)
            continue
        unet = f"full_h3_{fmt}_{a.blocks}blocks.safetensors"
        kind = base_sampler(sampler)  # stock#2 runs stock again
        attention, extra = CONTROLS.get(kind, ("auto", {}))
        if a.latents:
            extra = {**extra, "latent_path": str(a.latents / f"{card:g}gib_{fmt}_{seconds:g}s_{sampler}.pt")}
        write(run(row, prompt(unet, seconds, a.steps, 42, kind, card, attention, a.simulate, lora=lora, **extra),
                  f"{sampler}-{fmt}-{seconds}", kernels=a.kernels))
        advised = advised_segment_seconds(row)
        if advised and time.time() < a.deadline - 20:  # the refusal's own fix, as a user would apply it in Setup
            seg = Cell(fmt, seconds, "longmedia_advised").row(
                base, f"longmedia, as advised: segment_seconds {advised:g}", segment_seconds=advised)
            write(run(seg, prompt(unet, seconds, a.steps, 42, kind, card, "auto", a.simulate, lora=lora,
                                  job_seconds=seconds, segment_seconds=advised), f"advised-{fmt}-{seconds}"))
    if a.extras and card == 16 and "int8" in a.formats:
        from . import extras

        extras.run_extras(extras.Bench(a=a, card=card, base=base, run=run, reading=reading, write=write,
                                       steps_at=steps_at, prompt=prompt))
    memory.close()
    host.close()
    return 0


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
