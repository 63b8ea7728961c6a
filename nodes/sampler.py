"""LongMedia Sampler: SamplerCustomAdvanced's inputs and outputs, planned and streamed to fit the card."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.comfy.passes.sampler_inputs import job_for_latent, request_for_job
from ..longmedia.comfy.passes.segmented import run_job
from .controls import latent_outputs, memory_inputs, plan_request
from .report_output import report_output

Job = io.Custom("LONGMEDIA_JOB")
Retakes = io.Custom("LONGMEDIA_RETAKES")
SEEDS_HELP = ("Per-segment seeds of a segmented job, in segment order: a seed, or auto (the noise seed + the "
              "segment index). `auto, auto, 1234` retakes segment 2 with seed 1234. Empty: every segment auto.")
RETAKES_HELP = ("LongMedia Retakes: finished segments are kept, so after a change to segment k (its seed, its "
                "prompt) segments before k are reused and k and every later one are sampled again.")


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
                # after every older input, so workflows saved before them keep their widget values in place
                io.String.Input("segment_seeds", default="", optional=True, tooltip=SEEDS_HELP),
                Retakes.Input("retakes", optional=True, tooltip=RETAKES_HELP),
                io.String.Input("devices", default="", advanced=True, optional=True,
                                tooltip="Sequence parallelism over several devices: a comma-separated list starting "
                                        "with the model's own device, as ComfyUI's device options name them "
                                        "(gpu:0,gpu:1 or cuda:0,cuda:1; cpu,cpu tests it on the CPU). Each extra "
                                        "device runs a worker process that loads the same checkpoint. Empty, or "
                                        "the model's own device alone: one device (any other single entry is "
                                        "refused)."),
            ],
            outputs=[
                *latent_outputs(),
                io.String.Output(display_name="report", tooltip="The plan and what was measured, as JSON."),
            ],
        )

    @classmethod
    def execute(cls, noise, guider, sampler, sigmas, latent, job=None, segment_seeds="", retakes=None, devices="",
                **controls) -> io.NodeOutput:
        job = job_for_latent(job, latent)     # Setup's job or nothing, with the latent's canvas and length
        request = request_for_job(plan_request(controls), job)   # planned under the job's reference_budget
        result = run_job(noise, guider, sampler, sigmas, latent, request, job,
                         segment_seeds=segment_seeds, retakes=retakes, devices=devices)
        return report_output(result)
