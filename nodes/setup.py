"""LongMedia Setup: conditioning, the whole job's AV latent and the LONGMEDIA_JOB, through the stock H3 node logic."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.comfy.setup import FRAME_INPUTS, REFERENCE_GROUPS, family_check, run_setup, setup_media
from ..longmedia.errors import LongMediaInputError
from ..longmedia.h3 import lattice as L
from ..longmedia.h3.references import REFERENCE_BUDGETS
from ..longmedia.job.setup_plan import FAMILIES, SLOTS, SOUNDTRACK_PREFIX
from ..longmedia.limits import MAX_EDGE_PX, MAX_SECONDS, MIN_SECONDS
from ..longmedia.segments.timeline import DEFAULT_CONTEXT_FRAMES, MAX_SEGMENT_SECONDS

Job = io.Custom("LONGMEDIA_JOB")
BUDGET_HELP = ("Caps on references before they reach H3 (they ride through every step): low 512x512 pictures, "
               "512x288 x 22-frame videos, 5 s audio; medium / high larger; max = stock sizes. A reference over the "
               "cap is resized or trimmed and the job notes say so.")


FAMILY_HELP = "t2va: text; fl2va: first and/or last frame; ref2va: picture/video/audio references."
REFERENCE_HELP = {"pictures": "Picture reference <Picture N> (ref2va; numbered in order of connection).",
                  "videos": "Video reference <Video N>: frames at 24 fps (ref2va).",
                  "video_audios": "Soundtrack of ref_video_N (needs audio_vae).",
                  "audios": "Audio reference <Audio N> (needs audio_vae)."}
SEGMENT_PROMPTS_HELP = ("A prompt per segment (needs clip), one per line: either a list (line i is "
                        "segment i) or a schedule of `<seconds>s: <prompt>` lines (`0s: ...`, `10s: ...`). Missing "
                        "entries repeat the previous prompt; empty = every segment uses prompt.")
FRAME_HELP = {"first_frame": "fl2va: the first frame.", "last_frame": "fl2va: the last frame."}


def dynamic_inputs_available() -> bool:
    """This ComfyUI has the V3 schema's dynamic inputs (DynamicCombo, Autogrow)."""
    return hasattr(io, "DynamicCombo") and hasattr(io, "Autogrow")


def _family_inputs(dynamic: bool) -> list:
    """`family` and the inputs only some families use: a DynamicCombo whose fl2va option holds the frames and
    whose ref2va option holds one Autogrow per reference kind, or (older ComfyUI) a combo and flat sockets
    that web/lib/setup_sockets.js shows by family."""
    frames = [io.Image.Input(name, optional=True, tooltip=FRAME_HELP[name]) for name in FRAME_INPUTS]
    if not dynamic:
        return [io.Combo.Input("family", options=list(FAMILIES), default="t2va", tooltip=FAMILY_HELP)], \
            frames + _reference_inputs()
    groups = []
    for group, (prefix, most) in REFERENCE_GROUPS.items():
        kind = io.Audio if group.endswith("audios") else io.Image
        template = io.Autogrow.TemplateNames(kind.Input(prefix.rstrip("_"), optional=True, tooltip=REFERENCE_HELP[group]),
                                             names=[f"{prefix}{i}" for i in range(1, most + 1)], min=0)
        groups.append(io.Autogrow.Input(group, template=template, optional=True, tooltip=REFERENCE_HELP[group]))
    options = [io.DynamicCombo.Option("t2va", []), io.DynamicCombo.Option("fl2va", frames),
               io.DynamicCombo.Option("ref2va", groups)]
    assert [o.key for o in options] == list(FAMILIES)
    return [io.DynamicCombo.Input("family", options=options, tooltip=FAMILY_HELP)], []


def _reference_inputs() -> list:
    inputs = [io.Image.Input(f"{SLOTS['picture'][0]}{i}", optional=True,
                             tooltip=f"Picture reference <Picture {i}> (ref2va; numbered in order of connection).")
              for i in range(1, SLOTS["picture"][1] + 1)]
    for i in range(1, SLOTS["video"][1] + 1):
        inputs.append(io.Image.Input(f"ref_video_{i}", optional=True,
                                     tooltip=f"Video reference <Video {i}>: frames at 24 fps (ref2va)."))
        inputs.append(io.Audio.Input(f"{SOUNDTRACK_PREFIX}{i}", optional=True,
                                     tooltip=f"Soundtrack of ref_video_{i} (needs audio_vae)."))
    inputs += [io.Audio.Input(f"ref_audio_{i}", optional=True, tooltip=f"Audio reference <Audio {i}> (needs audio_vae).")
               for i in range(1, SLOTS["audio"][1] + 1)]
    return inputs


class LongMediaSetup(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        family, media = _family_inputs(dynamic_inputs_available())
        return io.Schema(
            node_id="LongMediaSetup",
            display_name="LongMedia Setup",
            category="LongMedia",
            description="MiniMax H3 job setup: size, duration (snapped to 17k+5 frames at 24 fps), t2va / fl2va / "
                        "ref2va conditioning through the stock H3 nodes, reference budget and segments.",
            inputs=[
                io.Int.Input("width", default=1344, min=L.CANVAS_MULTIPLE, max=MAX_EDGE_PX, step=L.CANVAS_MULTIPLE,
                             tooltip=f"Video width in pixels (multiple of {L.CANVAS_MULTIPLE})."),
                io.Int.Input("height", default=768, min=L.CANVAS_MULTIPLE, max=MAX_EDGE_PX, step=L.CANVAS_MULTIPLE,
                             tooltip=f"Video height in pixels (multiple of {L.CANVAS_MULTIPLE})."),
                io.Float.Input("seconds", default=10.0, min=MIN_SECONDS, max=MAX_SECONDS, step=0.5,
                               tooltip="Duration at 24 fps, snapped up to H3's 17k+5 frame grid (10 s -> 243 frames)."),
                *family,
                io.Combo.Input("reference_budget", options=list(REFERENCE_BUDGETS), default="low", tooltip=BUDGET_HELP),
                io.Float.Input("segment_seconds", default=0.0, min=0.0, max=MAX_SEGMENT_SECONDS, step=0.5,
                               tooltip="0 = one pass. Else new seconds per segment of a long job (16 GB: 5-10)."),
                io.Int.Input("context_frames", default=DEFAULT_CONTEXT_FRAMES, min=L.MIN_FRAMES, max=L.MAX_STOCK_FRAMES,
                             step=L.CLIP_FRAMES,
                             tooltip="Frames each later segment re-reads from the previous one (17k+5: 5, 22, 39 ...)."),
                io.Conditioning.Input("positive", optional=True,
                                      tooltip="Prompt conditioning (CLIPTextEncode) for t2va/fl2va. Or leave it "
                                              "unconnected and connect clip + prompt (required for ref2va); "
                                              "when it is connected the prompt box is not used."),
                # optional only so that it follows `positive` (ComfyUI lists required inputs first); execute
                # refuses a job without it
                io.Conditioning.Input("negative", optional=True,
                                      tooltip="Negative prompt (CLIPTextEncode), passed through as is. Connect one "
                                              "(an empty CLIPTextEncode is fine): Setup stops with a message "
                                              "when it is missing."),
                io.Clip.Input("clip", optional=True,
                              tooltip="H3 text encoder: Setup encodes `prompt` with the references / first-last "
                                      "frames shown to Qwen, as the stock H3 nodes do."),
                io.String.Input("prompt", multiline=True, dynamic_prompts=True, default="", optional=True,
                                tooltip="The prompt when clip is connected (refer to <Picture 1>, <Video 1>, <Audio 1>)."),
                io.Vae.Input("vae", optional=True, tooltip="H3 video VAE: encodes first/last frames and picture/video references."),
                io.Vae.Input("audio_vae", optional=True, tooltip="H3 audio VAE: encodes audio references and soundtracks."),
                io.Combo.Input("ref_image_size", options=["match", "max"], default="match", optional=True, advanced=True,
                               tooltip="Stock picture sizing: match = the video's area, max = 2048 short edge (slow)."),
                # after every older widget, so workflows saved before it keep their values in place
                io.String.Input("segment_prompts", multiline=True, default="", optional=True,
                                tooltip=SEGMENT_PROMPTS_HELP),
                *media,
            ],
            outputs=[
                io.Conditioning.Output(display_name="positive",
                                       tooltip="The prompt conditioning with the job's frames or references (for the "
                                               "guider)."),
                io.Conditioning.Output(display_name="negative", tooltip="The negative conditioning, as connected."),
                io.Latent.Output(display_name="latent", tooltip="The whole job's AV latent (segmented jobs too)."),
                Job.Output(display_name="job", tooltip="For LongMedia Sampler / Hi-Res / Refiner."),
            ],
        )

    @classmethod
    def validate_inputs(cls, reference_budget=None, family=None):
        # ComfyUI reports a failed check only against an input it passed in, and drops an unknown family, so one
        # always-present input rides along (its combo check, which ComfyUI then skips, is redone here); every other
        # input keeps ComfyUI's own checks
        return family_check(family, reference_budget)

    @classmethod
    def execute(cls, width, height, seconds, family, reference_budget, segment_seconds, context_frames,
                positive=None, negative=None, clip=None, prompt="", vae=None, audio_vae=None, ref_image_size="match",
                segment_prompts="", **media) -> io.NodeOutput:
        family, media = setup_media(family, media)
        first_frame, last_frame = (media.pop(name, None) for name in FRAME_INPUTS)
        if negative is None:
            raise LongMediaInputError("negative", None, "a CONDITIONING (CLIPTextEncode)",
                                      "Connect a negative prompt; an empty CLIPTextEncode is fine.")
        result = run_setup(positive, negative, width=width, height=height, seconds=seconds, family=family,
                           reference_budget=reference_budget, segment_seconds=segment_seconds,
                           context_frames=context_frames, ref_image_size=ref_image_size, clip=clip,
                           prompt=prompt, vae=vae, audio_vae=audio_vae, first_frame=first_frame,
                           last_frame=last_frame, references=media, segment_prompts=segment_prompts)
        return io.NodeOutput(result.positive, result.negative, result.latent, result.job,
                             ui={"text": [result.summary], "longmedia_job": [result.job.to_dict()]})
