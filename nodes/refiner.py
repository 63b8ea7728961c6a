"""LongMedia Refiner: a low-denoise last pass that keeps the previous stage's audio bit for bit."""

from __future__ import annotations

import comfy.samplers
from comfy_api.latest import io

from ..longmedia.comfy.passes.stages import run_refiner
from .controls import latent_outputs, memory_inputs, plan_request
from .report_output import report_output
from .sampler import Job


class LongMediaRefiner(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="LongMediaRefiner",
            display_name="LongMedia Refiner",
            category="LongMedia",
            description="Final low-denoise pass over the video, planned like the Sampler; the audio is kept exactly "
                        "(masked out of denoising, then restored). Connect Setup's job to refine a segmented job segment by "
                        "segment.",
            inputs=[
                io.Noise.Input("noise", tooltip="RandomNoise for the re-noising."),
                io.Guider.Input("guider", tooltip="CFGGuider / BasicGuider over the H3 model."),
                io.Sampler.Input("sampler", tooltip="Any ComfyUI sampler (KSamplerSelect)."),
                io.Latent.Input("latent", tooltip="The previous stage's output (Sampler or Hi-Res)."),
                Job.Input("job", optional=True,
                          tooltip="LongMedia Setup's job. A segmented job is refined segment by segment (each "
                                  "segment planned alone, continuing its neighbour, its audio kept)."),
                io.Combo.Input("scheduler", options=list(comfy.samplers.SCHEDULER_NAMES), default="simple",
                               tooltip="Schedule of the refiner steps (ignored when sigmas is connected)."),
                io.Int.Input("steps", default=4, min=1, max=1000,
                             tooltip="Refiner steps, on a schedule of its own: the last `steps` of a "
                                     "steps/denoise-step schedule of `scheduler` (unlike Hi-Res, which reruns the "
                                     "tail of the Sampler's sigmas; connect sigmas here to do the same)."),
                io.Float.Input("denoise", default=0.25, min=0.01, max=1.0, step=0.01,
                               tooltip="How much is re-noised: 0.1-0.3 polishes detail, higher changes content."),
                io.Sigmas.Input("sigmas", optional=True,
                                tooltip="Explicit schedule (e.g. SplitSigmas' low half); overrides scheduler, "
                                        "steps and denoise."),
                *memory_inputs(),
            ],
            outputs=[
                *latent_outputs(),
                io.String.Output(display_name="report", tooltip="The plan and what was measured (JSON)."),
            ],
        )

    @classmethod
    def execute(cls, noise, guider, sampler, latent, scheduler, steps, denoise, job=None, sigmas=None,
                **controls) -> io.NodeOutput:
        result = run_refiner(noise, guider, sampler, latent, plan_request(controls), sigmas=sigmas,
                             scheduler=scheduler, steps=steps, denoise=denoise, job=job)
        return report_output(result)
