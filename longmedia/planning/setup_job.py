"""The whole job as Setup can know it: the job's size and this machine, not the DiT checkpoint (Setup does not see
the model) nor the decode node that follows. `machine_job` plans it as `python -m longmedia plan` does with its
defaults (`whole_job.plan_job`), `job_note` is Setup's line for it, `decode_note` stock decode's stages."""

from __future__ import annotations

from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, ModelProfile
from . import stage_times as T
from .attention_path import default_attention_path
from .host_ram import DEFAULT_DISK_GBPS
from .planner import plan
from .policy import auto_reserve
from .types import PlanRequest
from .whole_job import JobPlan, decode_stages, plan_job, size


def decode_note(g: Geometry, device: DeviceProfile) -> str:
    """One line for Setup, which knows the job's size but not the DiT checkpoint nor the decode node that follows:
    stock decode's stages here (the remedy names Decode & Save when the whole video would not fit RAM)."""
    usable = device.usable_vram_bytes - auto_reserve(device)
    stages = decode_stages(g, device, usable, T.card_class(device.vram_total_bytes), decode="stock")
    ram = max(s.ram_need_bytes for s in stages)
    vram = max(s.vram_need_bytes for s in stages)
    gpu = device.vram_total_bytes > 0
    fits = all(s.fits_ram and (s.fits_vram or not gpu) for s in stages)
    head = (f"decode on this machine {'fits' if fits else 'DOES NOT FIT'}: {size(ram)} of RAM at its peak "
            f"({size(stages[0].ram_available_bytes)} available)")
    head += f", {size(vram)} of VRAM ({size(max(0, usable))} usable)" if gpu else ", VRAM not checked (no GPU)"
    bad = next((s.remedy for s in stages if s.remedy and (not s.fits_ram or (gpu and not s.fits_vram))), None)
    tail = f"; {bad}" if not fits and bad else ""
    return head + tail + "; the whole job with its checkpoints: python -m longmedia plan"


SETUP_MODEL = "h3-int8"   # the shipped workflows' DiT checkpoints (README's INT8 files): Setup does not see the model


def machine_job(g: Geometry, device: DeviceProfile, pinned_memory: bool = True,
                disk_gbps: float = DEFAULT_DISK_GBPS) -> JobPlan:
    """The whole job as Setup can know it: the job's geometry, this machine, the INT8 checkpoint the workflows load
    (`SETUP_MODEL`), the main pass planned by `planner.plan` and every stage by `plan_job` with its defaults (20 steps,
    cfg 1, the nvfp4 text encoder, Decode & Save): what `python -m longmedia plan` plans with its defaults."""
    request = PlanRequest(pinned_memory=pinned_memory, disk_gbps=disk_gbps)
    main = plan(ModelProfile.preset(SETUP_MODEL), device, g, request, attention_resolver=default_attention_path)
    return plan_job(main, request=request)


def job_note(job: JobPlan) -> str:
    """Setup's line for a job it does not refuse (`machine_job`): the verdict as the CLI's first lines say it; where
    only VRAM is short, a WARNING with the shortfalls (the Sampler plans with the checkpoint it is given, and
    memory_mode=ultra_low_vram runs a pass that fits no other mode)."""
    line = (f"on this machine ({SETUP_MODEL} checkpoint, python -m longmedia plan's defaults): "
            + "; ".join(job.headline()) + "; the verdict python -m longmedia plan prints and the Sampler reports")
    if job.fits:
        return line
    return ("WARNING: " + line + ": " + "; ".join(job.shortfalls()) + " (VRAM: the Sampler decides with your "
            "checkpoint; memory_mode=ultra_low_vram runs a pass that fits no other mode)")
