"""LongMedia Hi-Res: upscale the video latent (audio untouched), re-noise, and sample again, planned at the new size."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.comfy.passes.stages import run_hires
from ..longmedia.h3.latent_resample import METHODS
from .controls import latent_outputs, memory_inputs, plan_request
from .report_output import report_output
from .sampler import Job


class LongMediaHiRes(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="LongMediaHiRes",
            display_name="LongMedia Hi-Res",
            category="LongMedia",
            description="Second pass at a higher resolution: the first pass's video latent is upscaled (audio "
                        "untouched), re-noised to the tail of the schedule and sampled again, with the memory plan "
                        "redone for the larger sequence (video rows grow about scale^2). Connect "
                        "Setup's job to run a segmented job segment by segment.",
            inputs=[
                io.Noise.Input("noise", tooltip="RandomNoise for the re-noising and the second pass."),
                io.Guider.Input("guider", tooltip="The guider of the first pass (CFGGuider / BasicGuider over H3)."),
                io.Sampler.Input("sampler", tooltip="Any ComfyUI sampler (KSamplerSelect)."),
                io.Sigmas.Input("sigmas", tooltip="The same schedule as the Sampler's (BasicScheduler, denoise "
                                                  "1.0): Hi-Res reruns its last `denoise` share, so the second pass "
                                                  "continues the first on one noise scale. (The Refiner, a separate "
                                                  "polish, makes a short schedule of its own.)"),
                io.Latent.Input("latent", tooltip="The first pass's output latent (LongMedia Sampler)."),
                Job.Input("job", optional=True,
                          tooltip="LongMedia Setup's job. A segmented job runs Hi-Res segment by segment (each "
                                  "segment upscaled and planned alone, continuing its neighbour), so any length fits."),
                io.Float.Input("scale", default=1.25, min=1.0, max=2.0, step=0.05,
                               tooltip="Size factor, snapped to the /32 pixel grid. 1.2-1.5 on 16 GB cards; "
                                       "memory and time grow about scale^2."),
                io.Float.Input("denoise", default=0.5, min=0.0, max=1.0, step=0.05,
                               tooltip="Fraction of the schedule's steps run again (its last ones): 0.3-0.6."),
                io.Combo.Input("method", options=list(METHODS), default="bicubic",
                               tooltip="Built-in per-frame latent resampler (also lands a learned upscaler's "
                                       "output on the target size)."),
                io.Boolean.Input("keep_audio", default=True,
                                 tooltip="Keep the first pass's audio bit for bit (the video is refined around it). "
                                         "Off: the audio is re-noised and sampled again with the video."),
                io.LatentUpscaleModel.Input("upscaler", optional=True,
                                            tooltip="Optional learned latent upscaler (Load Latent Upscale Model) "
                                                    "for 24-channel H3 latents; else the built-in resampler."),
                io.Float.Input("renoise_sigma", default=0.0, min=0.0, max=1000.0, step=0.01, optional=True,
                               advanced=True, tooltip="0 = use denoise. Else start at this sigma and run the "
                                                      "schedule's steps below it."),
                *memory_inputs(),
            ],
            outputs=[
                *latent_outputs(),
                io.String.Output(display_name="report", tooltip="The new plan, the resize and what was measured (JSON)."),
            ],
        )

    @classmethod
    def execute(cls, noise, guider, sampler, sigmas, latent, scale, denoise, method, keep_audio, job=None,
                upscaler=None, renoise_sigma=0.0, **controls) -> io.NodeOutput:
        result = run_hires(noise, guider, sampler, sigmas, latent, plan_request(controls), scale=scale,
                           denoise=denoise, method=method, upscaler=upscaler, renoise_sigma=renoise_sigma,
                           keep_audio=keep_audio, job=job)
        return report_output(result)
