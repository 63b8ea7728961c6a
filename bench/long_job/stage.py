"""One stage's process: ComfyUI started in main.py's order, the bench's nodes registered, the stage's prompt run
through ComfyUI's PromptExecutor, a row per pass (`record.PassRecorder`) and one for the stage in OUT."""

from __future__ import annotations

import json
import time

from ..cards import comfy_process  # before torch: comfy-aimdo initialises first, as in main.py
from . import vae_files
from .job import bench_job
from .record import (
    CpuMark,
    NoDeviceMemory,
    PassRecorder,
    PeakSampler,
    device_memory_at_call,
    host_rss,
    host_split,
    reset_host_peak,
)
from .tables import append_row


def stage_job(a):
    """The job this stage process measures: the bench's, its Sampler at --sampler-steps when given."""
    return bench_job(a.smoke, a.sampler_steps)


def stage_prompt(a, job, unet: str) -> dict:
    """The stage's API prompt (decode: the decode node alone)."""
    work = str(a.out.resolve())
    if a.child == "decode":
        if a.smoke:    # tiny VAEs, built in the node (ComfyUI's loader recognises only the full-size layout)
            return {"run": {"class_type": "LongMediaLongJobDecode", "inputs": {
                "work_dir": work, "tiny": True, "seed": vae_files.VAE_SEED, "seeded_input": a.seeded_input}}}
        return {"vv": {"class_type": "VAELoader", "inputs": {"vae_name": vae_files.VIDEO_VAE_FILE}},
                "av": {"class_type": "VAELoader", "inputs": {"vae_name": vae_files.AUDIO_VAE_FILE}},
                "run": {"class_type": "LongMediaLongJobDecode", "inputs": {
                    "work_dir": work, "tiny": False, "seed": vae_files.VAE_SEED, "seeded_input": a.seeded_input,
                    "video_vae": ["vv", 0],
                    "audio_vae": ["av", 0]}}}
    steps = {"sampler": job.sampler_steps, "hires": job.hires_schedule_steps, "refiner": 1}[a.child]
    return {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": unet, "weight_dtype": "default"}},
        "shift": {"class_type": "MiniMaxH3SigmaShift", "inputs": {"model": ["unet", 0], "shift_video": 12.0,
                                                                   "shift_audio": 3.0}},
        "pos": {"class_type": "LongMediaBenchConditioning", "inputs": {"tokens": job.positive_tokens, "seed": 1,
                                                                          "tiny": a.smoke}},
        "neg": {"class_type": "LongMediaBenchConditioning", "inputs": {"tokens": job.negative_tokens, "seed": 2,
                                                                          "tiny": a.smoke}},
        "guider": {"class_type": "CFGGuider", "inputs": {"model": ["shift", 0], "positive": ["pos", 0],
                                                         "negative": ["neg", 0], "cfg": 1.0}},
        "sampler": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "sigmas": {"class_type": "BasicScheduler", "inputs": {"model": ["shift", 0], "scheduler": "simple",
                                                              "steps": steps, "denoise": 1.0}},
        "noise": {"class_type": "RandomNoise", "inputs": {"noise_seed": job.seed + STAGE_SEED[a.child]}},
        "run": {"class_type": "LongMediaLongJobStage", "inputs": {
            "noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0], "sigmas": ["sigmas", 0],
            "positive": ["pos", 0], "negative": ["neg", 0], "stage": a.child, "job_json": json.dumps(job.to_dict()),
            "card_gib": a.card, "work_dir": work, "pass_first": a.passes[0], "pass_stop": a.passes[1],
            "seeded_input": a.seeded_input}},
    }


STAGE_SEED = {"sampler": 0, "hires": 100, "refiner": 200, "decode": 300}


def stage_main(a) -> int:
    start = comfy_process.start_comfyui(["--cpu"] if a.smoke else [])
    import torch

    comfy_process.load_builtin_nodes()
    import comfy.model_management as mm
    import execution
    import folder_paths

    from longmedia.comfy.host.memory import pinned_ram_bytes

    from ..cards.host_memory import HostMemory
    from ..cards.measure import executor_class
    from ..cards.prompts import Server
    from ..cards.step_clock import CudaMark
    from . import nodes

    cuda = torch.cuda.is_available() and not a.smoke
    memory = comfy_process.DeviceMemory() if cuda else NoDeviceMemory()
    job = stage_job(a)
    base = {"stage": a.child, "passes": list(a.passes), "card_gib": a.card, "blocks": a.blocks, "smoke": a.smoke,
            "device": start.device_name, "aimdo_enabled": start.aimdo_enabled, "job": job.to_dict(),
            "seeded_input": a.seeded_input,
            **json.loads(a.host_row)}   # the parent's host RAM limit (host_ram_gib None: all of it)

    model_calls = []

    def emit(row: dict) -> None:
        row = base | row
        model_calls.append(row.get("model_calls") or 0)
        append_row(a.out, row)
        print(json.dumps({k: row.get(k) for k in ("kind", "stage", "segment", "s_per_step", "process_peak_bytes",
                                                   "host_rss_peak_bytes", "result")}), flush=True)

    recorders = []
    meters = (PeakSampler(host_split),)           # per pass (reset when a pass starts)
    stage_meters = (PeakSampler(host_split),)     # the whole stage
    at_call = device_memory_at_call(torch.cuda) if cuda else None

    def recorder_for(stage: str, first: int) -> PassRecorder:
        recorders.append(PassRecorder(stage, first, memory, emit, CudaMark.now if cuda else CpuMark.now, meters,
                                      at_call))
        return recorders[-1]

    nodes.register(recorder_for)
    folder_paths.add_model_folder_path("diffusion_models", str(a.models))
    folder_paths.add_model_folder_path("vae", str(a.models))
    executor = executor_class(execution)(Server(), cache_type=execution.CacheType.CLASSIC,
                                         cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})
    stage_memory = comfy_process.DeviceMemory() if cuda else NoDeviceMemory()
    host = HostMemory(pinned=pinned_ram_bytes)  # MemAvailable's minimum, pinned RAM and disk reads of the stage
    unet = a.unet
    reset_host_peak()
    rss_before, _ = host_rss()
    stage_memory.reset()
    for meter in stage_meters:
        meter.reset()
    host.reset()
    t0 = time.perf_counter()
    executor.execute(stage_prompt(a, job, unet), f"long-job-{a.child}", {"client_id": "bench"}, ["run"])
    if cuda:
        torch.cuda.synchronize()
    for r in recorders:
        r.finish()
    rss, rss_peak = host_rss()
    host_fields = host.fields(calls=1)
    calls = sum(model_calls)
    disk_read = host_fields["disk_read_bytes"]
    row = {"kind": "stage", "model_calls": calls, "disk_read_bytes": disk_read,
           "disk_read_per_call_bytes": disk_read // calls if disk_read is not None and calls else None,
           "mem_available_min_bytes": host_fields["mem_available_min_bytes"],
           "pinned_peak_bytes": host_fields["pinned_peak_bytes"], "wall_s": time.perf_counter() - t0, "host_rss_before_bytes": rss_before,
           "host_rss_peak_bytes": rss_peak, "host_rss_after_bytes": rss,
           "process_peak_bytes": stage_memory.peak().get("process_bytes"),
           "torch_peak_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
           "result": "ok" if executor.success else "error"} | {k: v for m in stage_meters for k, v in m.peak().items()}
    if not executor.success:
        err = next((d for ev, d in executor.status_messages if ev == "execution_error"), {})
        row["error"] = f"{err.get('exception_type', '?')}: {err.get('exception_message', '')}"[:4000]
    ui = executor.history_result.get("outputs", {}).get("run", {}) if executor.success else {}
    if ui.get("report"):
        rep = json.loads(ui["report"][0])
        row["segments"] = [{"segment": s["index"], "seed": s["seed"], "pass_frames": s["pass_frames"],
                            "context_frames": s["context_frames"], "sample_seconds": s["sample_seconds"],
                            "seconds_per_step": s["seconds_per_step"], "torch_peak_bytes": s["peak_bytes"],
                            "seq_len": s["run"]["plan"]["geometry"]["seq_len"],
                            "width": s["run"]["plan"]["geometry"]["width"],
                            "height": s["run"]["plan"]["geometry"]["height"],
                            "memory_mode": s["run"]["plan"]["memory_mode"],
                            "attention_backend": s["run"].get("attention_backend"),
                            "predicted_peak_bytes": s["run"]["plan"].get("predicted_peak_bytes"),
                            # what the prediction is measured against: the device as the plan read it
                            "usable_bytes": s["run"]["plan"].get("usable_bytes"),
                            "activation_reserve_bytes": s["run"]["plan"].get("activation_reserve_bytes"),
                            "activation_need_bytes": (s["run"]["plan"].get("memory") or {}).get(
                                "activation_need_bytes"),
                            "device_at_plan": {k: (s["run"]["plan"].get("device") or {}).get(k) for k in
                                               ("vram_total_bytes", "vram_free_bytes", "allocator_reserved_bytes")}}
                           for s in rep.get("segments", [])]
        row["notes"] = rep.get("notes")
        row["seams"] = (ui.get("seams") or [None])[0]
        row["segment_count"] = (ui.get("segments") or [None])[0]
    if ui.get("decode"):
        row["decode"] = ui["decode"][0]
    emit(row)
    for closable in (memory, stage_memory, host, *meters, *stage_meters):
        closable.close()
    mm.unload_all_models()
    return 0 if executor.success else 1
