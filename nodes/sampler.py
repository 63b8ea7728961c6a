"""LongMedia Sampler: SamplerCustomAdvanced's inputs and outputs, planned and streamed to fit the card."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.comfy.inputs import job_for_latent
from ..longmedia.comfy.sampler import run_sampler
from ..longmedia.comfy.segmented import run_segmented
from .controls import latent_outputs, memory_inputs, plan_request
from .report_output import report_output

Job = io.Custom("LONGMEDIA_JOB")


class LongMediaSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="LongMediaSampler",
            display_name="LongMedia Sampler",
            category="LongMedia",
            description="Drop-in for SamplerCustomAdvanced on MiniMax H3: plans memory for the real packed sequence, "
                        "streams blocks exactly when the stock path would not fit, and reports what it did.",
            inputs=[
                io.Noise.Input("noise", tooltip="RandomNoise / DisableNoise, as for SamplerCustomAdvanced."),
                io.Guider.Input("guider", tooltip="CFGGuider or BasicGuider over a MiniMax H3 model."),
                io.Sampler.Input("sampler", tooltip="Any ComfyUI sampler (KSamplerSelect)."),
                io.Sigmas.Input("sigmas", tooltip="The schedule (BasicScheduler, SplitSigmas ...): non-increasing."),
                io.Latent.Input("latent", tooltip="The H3 AV latent (LongMedia Setup or EmptyMiniMaxH3LatentAV)."),
                Job.Input("job", optional=True, tooltip="LongMedia Setup's job (geometry, references, segments)."),
                *memory_inputs(),
                io.String.Input("devices", default="", advanced=True, optional=True,
                                tooltip="Sequence parallelism over several devices: a comma-separated list starting "
                                        "with the model's own device, as ComfyUI's device options name them "
                                        "(gpu:0,gpu:1 or cuda:0,cuda:1; cpu,cpu tests it on the CPU). Each extra "
                                        "device runs a worker process that loads the same checkpoint. Empty: one "
                                        "device."),
            ],
            outputs=[
                *latent_outputs(),
                io.String.Output(display_name="report", tooltip="The plan and what was measured, as JSON."),
            ],
        )

    @classmethod
    def execute(cls, noise, guider, sampler, sigmas, latent, job=None, devices="", **controls) -> io.NodeOutput:
        job = job_for_latent(job, latent)     # Setup's job or nothing, with the latent's canvas and length
        if job is not None and job.segmented:  # one pass per segment, assembled
            result = run_segmented(noise, guider, sampler, sigmas, latent, plan_request(controls), job.segments,
                                   devices=devices)
        else:
            result = run_sampler(noise, guider, sampler, sigmas, latent, plan_request(controls), devices=devices)
        return report_output(result)
