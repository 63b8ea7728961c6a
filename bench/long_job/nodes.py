"""The long-job bench's ComfyUI nodes, registered in-process (never shipped in the pack).

- LongMediaBenchConditioning (the card bench's node): random H3 CONDITIONING (full text width, or the tiny
  checkpoint's for --smoke).
- LongMediaLongJobStage: one DiT stage of the job through the product's own functions, as the nodes call them:
  `run_setup` (Setup), then `run_segmented` (Sampler), `run_hires` or `run_refiner` on Setup's job, planned for
  the card (`bench.cards.nodes.card_probe`: read after each pass's boundary, the card's total), for passes
  [pass_first, pass_stop); the stage's latents (output and denoised) are saved to WORK/<stage>.pt after it, and
  read from there by the stage's next process (`done`) and by the next stage.
- LongMediaLongJobDecode: LongMedia Decode & Save on the Refiner's latent with ComfyUI's H3 VAEs: full size with
  random weights, loaded from files by ComfyUI's VAELoader (`vae_files`), or tiny ones built here for --smoke.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

INPUT_STAGE = {"sampler": None, "hires": "sampler", "refiner": "hires", "decode": "refiner"}


def save_latents(path: Path, result, passes_done: int) -> None:
    import torch

    torch.save({"output": [t.float().cpu() for t in result.output["samples"].unbind()],
                "denoised": [t.float().cpu() for t in result.denoised["samples"].unbind()],
                "passes_done": passes_done}, path)


def load_latents(path: Path) -> dict:
    import torch

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the stage that makes it first (bench.long_job --stage ...)")
    return torch.load(path, weights_only=True)


SEEDED_INPUT_SEED = 45   # --seeded-input: the random latent a stage starts from when its input is missing


def seeded_latent(shapes, seed: int) -> tuple:
    """Standard normal streams of the given shapes (float32 on the CPU), from `seed`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(tuple(shape), generator=g, dtype=torch.float32) for shape in shapes)


def seeded_input_shapes(stage: str, setup_streams, hires_scale: float) -> tuple:
    """The shapes of `stage`'s input latent: the Sampler's output (Setup's latent) for Hi-Res; Hi-Res's output for
    the Refiner, its video at Hi-Res's size (`target_latent_size`, as `run_hires` upscales), its audio unchanged."""
    from longmedia.h3.latent_resample import target_latent_size

    shapes = [tuple(t.shape) for t in setup_streams]
    if stage == "refiner":
        video = shapes[0]
        shapes[0] = video[:-2] + target_latent_size(int(video[-2]), int(video[-1]), hires_scale)
    return tuple(shapes)


def _nested(streams):
    import comfy.nested_tensor

    return {"samples": comfy.nested_tensor.NestedTensor(tuple(streams))}


def make_nodes(recorder_for) -> dict:
    """The node classes; `recorder_for(stage, first_pass)` gives the PassRecorder of this process's stage."""

    class LongMediaLongJobStage:
        RETURN_TYPES = ()
        FUNCTION = "run"
        OUTPUT_NODE = True
        CATEGORY = "longmedia/bench"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"noise": ("NOISE",), "guider": ("GUIDER",), "sampler": ("SAMPLER",),
                                 "sigmas": ("SIGMAS",), "positive": ("CONDITIONING",),
                                 "negative": ("CONDITIONING",), "stage": ("STRING", {"default": "sampler"}),
                                 "job_json": ("STRING", {"default": "{}"}), "card_gib": ("FLOAT", {"default": 16.0}),
                                 "work_dir": ("STRING", {"default": ""}),
                                 "pass_first": ("INT", {"default": 0, "min": 0, "max": 10000}),
                                 "pass_stop": ("INT", {"default": 0, "min": 0, "max": 10000}),
                                 "seeded_input": ("BOOLEAN", {"default": False})}}

        def run(self, noise, guider, sampler, sigmas, positive, negative, stage, job_json, card_gib, work_dir,
                pass_first, pass_stop, seeded_input=False):
            import comfy.model_patcher
            import torch

            from longmedia.comfy.passes.segmented import run_segmented
            from longmedia.comfy.passes.stages import run_hires, run_refiner
            from longmedia.comfy.setup import run_setup
            from longmedia.planning.types import PlanRequest
            from longmedia.segments.seam_steps import seam_steps

            from ..cards.nodes import card_probe

            job_values = json.loads(job_json)
            work = Path(work_dir)
            setup = run_setup(positive, negative, width=job_values["width"], height=job_values["height"],
                              seconds=job_values["seconds"], segment_seconds=job_values["segment_seconds"],
                              context_frames=job_values["context_frames"])
            job = setup.job
            stop = pass_stop or job.segments.count
            latent = setup.latent
            if INPUT_STAGE[stage] is not None and seeded_input and not (work / f"{INPUT_STAGE[stage]}.pt").is_file():
                shapes = seeded_input_shapes(stage, latent["samples"].unbind(), job_values["hires_scale"])
                latent = _nested(seeded_latent(shapes, SEEDED_INPUT_SEED))
            elif INPUT_STAGE[stage] is not None:
                given = load_latents(work / f"{INPUT_STAGE[stage]}.pt")
                if given["passes_done"] != job.segments.count:
                    raise ValueError(f"{INPUT_STAGE[stage]}.pt holds passes up to {given['passes_done']} of "
                                     f"{job.segments.count}: finish that stage first")
                latent = _nested(given["output"])
            done = None
            if pass_first > 0:
                saved = load_latents(work / f"{stage}.pt")
                if saved["passes_done"] != pass_first:
                    raise ValueError(f"{work / stage}.pt holds passes up to {saved['passes_done']}, not {pass_first}")
                done = (tuple(saved["output"]), tuple(saved["denoised"]))
            g = copy.copy(guider)
            g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
            recorder = recorder_for(stage, pass_first)
            recorder.install(g.model_options)
            cuda = torch.device(g.model_patcher.load_device).type == "cuda"
            profile = card_probe(card_gib, "ballast", g.model_patcher.load_device) if cuda else None
            common = dict(device_profile=profile, passes=(pass_first, stop), done=done)
            request = PlanRequest()
            if stage == "sampler":
                result = run_segmented(noise, g, sampler, sigmas, latent, request, job.segments, **common)
            elif stage == "hires":
                result = run_hires(noise, g, sampler, sigmas, latent, request, scale=job_values["hires_scale"],
                                   denoise=job_values["hires_denoise"], job=job, **common)
            else:
                result = run_refiner(noise, g, sampler, latent, request, steps=job_values["refiner_steps"],
                                     denoise=job_values["refiner_denoise"], job=job, **common)
            recorder.finish()
            save_latents(work / f"{stage}.pt", result, stop)
            seams = None
            if stop == job.segments.count:
                s = seam_steps(job.segments, *result.output["samples"].unbind())
                seams = {"video": list(s.video), "audio": list(s.audio), "inside_video_max": s.inside_video_max,
                         "inside_audio_max": s.inside_audio_max, "line": s.line()}
            return {"ui": {"report": [result.report.to_json()], "seams": [seams], "segments": [job.segments.count]}}

    class LongMediaLongJobDecode:
        RETURN_TYPES = ()
        FUNCTION = "run"
        OUTPUT_NODE = True
        CATEGORY = "longmedia/bench"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"work_dir": ("STRING", {"default": ""}), "tiny": ("BOOLEAN", {"default": False}),
                                 "seed": ("INT", {"default": 0, "min": 0, "max": 2 ** 31 - 1}),
                                 "seeded_input": ("BOOLEAN", {"default": False})},
                    "optional": {"video_vae": ("VAE",), "audio_vae": ("VAE",)}}

        def run(self, work_dir, tiny, seed, seeded_input=False, video_vae=None, audio_vae=None):
            import comfy.sd
            from comfy.ldm.minimax import audio_vae as minimax_audio_vae
            from comfy.ldm.minimax import vae as minimax_vae

            from longmedia.comfy.decode_save import decode_and_save
            from longmedia.testing import tiny_vae

            work = Path(work_dir)
            if seeded_input and not (work / "refiner.pt").is_file():   # the Refiner keeps Hi-Res's shape
                shapes = (t.shape for t in load_latents(work / "hires.pt")["output"])
                latent = _nested(seeded_latent(shapes, SEEDED_INPUT_SEED))
            else:
                latent = _nested(load_latents(work / "refiner.pt")["output"])
            if tiny:
                video_vae = tiny_vae.tiny_video_vae(comfy.sd, minimax_vae, seed=seed)
                audio_vae = tiny_vae.tiny_audio_vae(comfy.sd, minimax_audio_vae, seed=seed + 1)
            elif video_vae is None or audio_vae is None:
                raise ValueError("the full-size decode takes both VAEs from ComfyUI's VAELoader (bench.long_job "
                                 "writes their files: vae_files.py)")
            recorder = recorder_for("decode", 0)
            recorder.pass_started()                  # the decode is one "pass": its peak and time
            saved = decode_and_save(latent, video_vae, audio_vae, filename_prefix="long_job/h3",
                                    output_dir=str(work))
            recorder.finish()
            return {"ui": {"decode": [saved.report.to_dict()]}}

    from bench.cards.nodes import LongMediaBenchConditioning

    return {"LongMediaBenchConditioning": LongMediaBenchConditioning,
            "LongMediaLongJobStage": LongMediaLongJobStage, "LongMediaLongJobDecode": LongMediaLongJobDecode}


def register(recorder_for) -> None:
    import nodes

    nodes.NODE_CLASS_MAPPINGS.update(make_nodes(recorder_for))
