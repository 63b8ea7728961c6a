"""Child process of test_long_job: one whole long job on the CPU, each stage's peak RSS growth.

argv: OUT_DIR CHECKPOINT FRAMES. Setup -> segmented Sampler -> Hi-Res x1.5 -> Refiner (each on Setup's job, one
pass per segment) -> LongMedia Decode & Save (the tiny H3 video and audio VAEs: ComfyUI's classes, in ComfyUI's
wrapper), at 256x256 px in 39/24 s segments with 22 context frames, on the tiny random H3 checkpoint. Before
each stage the kernel's peak-RSS mark is reset (VmHWM via /proc/self/clear_refs); the stage's growth is its peak
RSS minus RSS when it started. Prints `STAGE <name> <growth bytes>` per stage, `HELD <bytes>` (RSS after the job
minus before it: what the job's latents keep), `WHOLE <bytes>` (the whole video as float32 frames, what stock
decode would hold), `SEGMENTS <n>` and the Hi-Res seam line. On the CPU each stage's device working memory
(the GPU's, on a real run) is host RAM too: the same for every length, since every pass has the same size.
"""

from __future__ import annotations

import sys
from pathlib import Path

SIDE = 256
SEGMENT_SECONDS, CONTEXT = 39 / 24, 22


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


class Stages:
    def __init__(self):
        self.lines = []

    def run(self, name, fn, *args, **kwargs):
        Path("/proc/self/clear_refs").write_text("5")        # VmHWM := current RSS
        before = _status("VmRSS")
        out = fn(*args, **kwargs)
        self.lines.append(f"STAGE {name} {_status('VmHWM') - before}")
        return out


def main() -> None:
    out_dir, checkpoint, frames = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    import torch
    from comfy.cli_args import args

    args.cpu = True
    import comfy.samplers
    import comfy.sd
    from comfy.ldm.minimax import audio_vae, vae
    from comfy_extras import nodes_custom_sampler as ncs

    from longmedia.comfy.decode_save import decode_and_save
    from longmedia.comfy.passes.segmented import run_segmented
    from longmedia.comfy.passes.stages import run_hires, run_refiner
    from longmedia.comfy.setup import run_setup
    from longmedia.planning.types import PlanRequest
    from longmedia.segments.seam_steps import seam_steps
    from longmedia.testing import conditioning as tc
    from longmedia.testing.tiny_h3 import TINY_DIMS
    from longmedia.testing.tiny_vae import tiny_audio_vae, tiny_video_vae

    request = PlanRequest(memory_mode="normal", attention_mode="existing")
    with torch.inference_mode():
        model = comfy.sd.load_diffusion_model(checkpoint)
        video_vae, sound_vae = tiny_video_vae(comfy.sd, vae, seed=1), tiny_audio_vae(comfy.sd, audio_vae, seed=2)
        pos, neg = tc.random_conditioning(13, dims=TINY_DIMS, seed=3), tc.random_conditioning(5, dims=TINY_DIMS, seed=4)
        euler = comfy.samplers.sampler_object("euler")
        sigmas = comfy.samplers.calculate_sigmas(model.get_model_object("model_sampling"), "simple", 2).cpu()
        stages = Stages()
        start = _status("VmRSS")
        setup = stages.run("setup", run_setup, pos, neg, width=SIDE, height=SIDE, seconds=frames / 24,
                           segment_seconds=SEGMENT_SECONDS, context_frames=CONTEXT)
        job = setup.job
        guider = comfy.samplers.CFGGuider(model)
        guider.set_conds(setup.positive, setup.negative)
        guider.set_cfg(3.0)
        first = stages.run("sampler", run_segmented, ncs.Noise_RandomNoise(7), guider, euler, sigmas, setup.latent,
                           request, job.segments)
        hires = stages.run("hires", run_hires, ncs.Noise_RandomNoise(8), guider, euler, sigmas, first.output, request,
                           scale=1.5, denoise=0.5, job=job)
        final = stages.run("refiner", run_refiner, ncs.Noise_RandomNoise(9), guider, euler, hires.output, request,
                           steps=1, denoise=0.25, job=job)
        saved = stages.run("decode_save", decode_and_save, final.output, video_vae, sound_vae,
                           filename_prefix=f"long/job_{frames}", output_dir=str(out_dir))
        held = _status("VmRSS") - start
        report = saved.report
        assert report.frames == job.segments.pixel_frames == frames, report
        assert (report.width, report.height) == (SIDE * 3 // 2, SIDE * 3 // 2), report
        assert torch.equal(final.output["samples"].unbind()[1], first.output["samples"].unbind()[1])
        for result in (first, hires, final):
            assert len(result.report.segments) == job.segments.count
        print("\n".join(stages.lines))
        latents = [setup.latent] + [r.output for r in (first, hires, final)] + [r.denoised for r in (first, hires, final)]
        kept = sum(t.numel() * t.element_size() for lat in latents for t in lat["samples"].unbind())
        print(f"HELD {held}")
        print(f"LATENTS {kept}")
        print(f"WHOLE {report.whole_video_bytes}")
        print(f"CHUNK {report.largest_chunk_bytes}")
        print(f"SEGMENTS {job.segments.count}")
        print(f"SEAMS {seam_steps(job.segments, *hires.output['samples'].unbind()).line()}")


if __name__ == "__main__":
    main()
