"""The long job the bench runs, and what LongMedia's planners say about it before anything runs (no ComfyUI here)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

STAGES = ("sampler", "hires", "refiner", "decode")
PLAN_STAGE = {"sampler": "DiT main pass", "hires": "DiT Hi-Res pass", "refiner": "DiT Refiner pass",
              "decode": "video decode"}   # the whole-job plan's stage of each bench stage


@dataclass(frozen=True)
class LongJob:
    """Setup's values and each stage's steps. Hi-Res runs the tail of a ceil(steps / denoise)-step schedule."""

    width: int = 1344
    height: int = 768
    seconds: float = 60.0
    segment_seconds: float = 10.0
    context_frames: int = 22
    hires_scale: float = 1.25
    sampler_steps: int = 2
    hires_steps: int = 1
    hires_denoise: float = 0.5
    refiner_steps: int = 1
    refiner_denoise: float = 0.25
    seed: int = 42
    positive_tokens: int = 128
    negative_tokens: int = 16

    @property
    def hires_schedule_steps(self) -> int:
        """BasicScheduler's steps for Hi-Res: its tail of round(steps * denoise) steps is `hires_steps`."""
        return math.ceil(self.hires_steps / self.hires_denoise)

    def segments(self):
        from longmedia.segments.timeline import plan_segments

        return plan_segments(total_seconds=self.seconds, segment_seconds=self.segment_seconds,
                             context_frames=self.context_frames)

    def steps(self, stage: str) -> int:
        return {"sampler": self.sampler_steps, "hires": self.hires_steps, "refiner": self.refiner_steps}.get(stage, 0)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FULL = LongJob()
SMOKE = LongJob(width=64, height=64, seconds=2.0, segment_seconds=1.0, hires_scale=1.5)


def bench_job(smoke: bool, sampler_steps: int | None = None) -> LongJob:
    """The job a run measures: FULL (SMOKE with --smoke), its Sampler at `sampler_steps` when given (8 for the turbo
    schedule; every other stage keeps its steps)."""
    job = SMOKE if smoke else FULL
    return job if sampler_steps is None else dataclasses.replace(job, sampler_steps=sampler_steps)


def job_plan(job: LongJob, card_gib: float, ram_gib: float, blocks: int, checkpoint: str | None = None) -> dict:
    """{bench stage: the whole-job plan's figures for it} for `job` on a `card_gib` card with `ram_gib` of RAM
    (LongMedia's planners): RAM and VRAM needs, estimated seconds, and for the DiT stages the pass plan (rows, mode,
    predicted peak) of the longest pass. The model is `checkpoint`'s own profile (its safetensors header) when
    given, else the INT8 preset with `blocks` DiT blocks (the bench's checkpoint keeps its adaLN projections bf16:
    about 13 GiB more than the preset at 50 blocks)."""
    from longmedia.h3.dims import H3_FULL
    from longmedia.h3.profiles import DeviceProfile, ModelProfile
    from longmedia.job.geometry import build_geometry
    from longmedia.planning.planner import plan
    from longmedia.planning.whole_job import hires_size, plan_job

    model = (ModelProfile.from_safetensors(checkpoint) if checkpoint else
             ModelProfile.preset("h3-int8", dims=dataclasses.replace(H3_FULL, num_blocks=blocks)))
    device = DeviceProfile.card(card_gib, ram_gib)

    def pass_plan(width: int, height: int):
        g = build_geometry(width, height, seconds=job.seconds, segment_seconds=job.segment_seconds,
                           context_frames=job.context_frames, text_tokens=job.positive_tokens)
        return plan(model, device, g)

    main = pass_plan(job.width, job.height)
    hires = pass_plan(*hires_size(job.width, job.height, job.hires_scale))
    whole = plan_job(main, steps=job.sampler_steps, hires_plan=hires, hires_steps=job.hires_steps,
                     refiner_steps=job.refiner_steps)
    by_name = {s.name: s for s in whole.stages}
    out = {}
    model_row = {"source": model.source, "weight_bytes": model.weight_bytes, "blocks": model.dims.num_blocks}
    for stage in STAGES:
        s = by_name[PLAN_STAGE[stage]]
        row = {"plan_stage": s.name, "ram_need_bytes": s.ram_need_bytes, "vram_need_bytes": s.vram_need_bytes,
               "vram_usable_bytes": s.vram_usable_bytes, "estimated_s": s.seconds, "fits": s.fits, "model": model_row,
               "host_ram": s.host_ram.to_dict() if s.host_ram is not None else None}
        p = {"sampler": main, "hires": hires, "refiner": hires}.get(stage)
        if p is not None:
            g = p.geometry
            row.update(width=g.width, height=g.height, pass_frames=g.frames, seq_len=g.seq_len,
                       memory_mode=p.memory_mode, predicted_peak_bytes=p.predicted_peak_bytes,
                       passes=g.segment_count)
        out[stage] = row
    return out
