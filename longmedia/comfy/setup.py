"""Setup's ComfyUI side: read the node's tensors, apply the plan, and let the stock H3 node logic build the job.

Conditioning and latents come from ComfyUI's own H3 code (`comfy_extras.nodes_minimax_h3`):
`_empty_av_latent` for the latent of the whole job, MiniMaxH3ImageToVideo / MiniMaxH3AddGuide for
first/last frames, MiniMaxH3ReferenceToVideo for references. Setup only shrinks or trims references
first when the reference budget says so (`setup_job.ReferencePrep`). ComfyUI is imported lazily.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import LongMediaInputError
from ..h3.profiles import COMFYUI_HELD_BYTES, DeviceProfile, context_bytes
from ..h3.references import REFERENCE_BUDGETS
from ..job.job import LongMediaJob
from ..job.preflight import LATENT_SEGMENTS_KEY, check_job_fits
from ..job.setup_plan import (
    FAMILIES,
    SLOTS,
    SOUNDTRACK_PREFIX,
    MediaInput,
    SetupPlan,
    SetupRequest,
    check_soundtracks,
    plan_setup,
)
from ..limits import MAX_TEXT_TOKENS
from ..report.oom import phase
from ..segments.prompts import SegmentPrompts, parse_segment_prompts
from .host.memory import comfy_reading
from .passes.sampler_inputs import text_rows

REFERENCE_INPUTS = tuple(f"{prefix}{i}" for prefix, most in SLOTS.values() for i in range(1, most + 1)) + \
    tuple(f"{SOUNDTRACK_PREFIX}{i}" for i in range(1, SLOTS["video"][1] + 1))
FRAME_INPUTS = ("first_frame", "last_frame")
# Setup's Autogrow groups under the `family` DynamicCombo's ref2va option: group -> (slot prefix, slots)
REFERENCE_GROUPS = {"pictures": SLOTS["picture"], "videos": SLOTS["video"],
                    "video_audios": (SOUNDTRACK_PREFIX, SLOTS["video"][1]), "audios": SLOTS["audio"]}


def _leaves(value: dict, path: str) -> dict[str, tuple[str, object]]:
    """A DynamicCombo/Autogrow value (nested dicts) -> {last name: (dotted input name, value)}."""
    out = {}
    for key, inner in value.items():
        name = f"{path}.{key}"
        if isinstance(inner, dict) and not {"waveform", "sample_rate"} & set(inner):   # AUDIO is a dict too
            out.update(_leaves(inner, name))
        else:
            out[key] = (name, inner)
    return out


def family_check(family, reference_budget=None) -> bool | str:
    """Setup's `validate_inputs`: True, or ComfyUI's validation message naming the allowed families.

    ComfyUI's V3 DynamicCombo drops an unknown option (an API prompt's "i2v") from the inputs without an error, so
    `family` then arrives as None and the run would fail later with a missing argument; a plain combo's value
    arrives as it was given. `reference_budget` is the input that carries the message (ComfyUI reports a failed
    check against an input it passed in), so its combo check is made here."""
    if reference_budget not in REFERENCE_BUDGETS:
        return f"reference_budget must be one of {', '.join(repr(b) for b in REFERENCE_BUDGETS)}; got {reference_budget!r}"
    name = family.get("family") if isinstance(family, dict) else family
    if name in FAMILIES:
        return True
    given = "none that ComfyUI kept (an unknown option of the dynamic input is dropped)" if name is None else repr(name)
    return f"family must be one of {', '.join(repr(f) for f in FAMILIES)}; got {given}"


def setup_media(family, extra: dict) -> tuple[str, dict]:
    """Setup's `family` and its frame / reference inputs in either schema, as (family name, {core name: value}).

    Where ComfyUI has V3 dynamic inputs, `family` arrives as the DynamicCombo's nested dict
    ({"family": "ref2va", "pictures": {"ref_image_1": ...}, ...}); otherwise it is the family name. Workflows
    and API prompts saved with the flat names (ref_image_1, first_frame) still reach execute as extra keywords
    on either host, and those saved with the dotted names (family.pictures.ref_image_1) as dotted keywords on a
    host without dynamic inputs; every form lands on the flat core names.
    """
    given: dict[str, tuple[str, object]] = {}
    if isinstance(family, dict):
        nested = _leaves(family, "family")
        family = nested.pop("family", (None, None))[1]
        given.update(nested)
    for name, value in extra.items():
        core = name.rsplit(".", 1)[-1]
        if core in given and given[core][1] is not None and value is not None:
            raise LongMediaInputError(name, "connected", f"one source for {core}, but {given[core][0]} is connected "
                                      "too", f"Disconnect {name} (the old name of {given[core][0]}).")
        if value is not None or core not in given:
            given[core] = (name, value)
    known = FRAME_INPUTS + REFERENCE_INPUTS
    for core, (name, _) in given.items():
        if core not in known:
            raise LongMediaInputError(name, "given", "one of " + ", ".join(known), "Rename the input.")
    return family, {core: value for core, (_, value) in given.items() if value is not None}


@dataclass(frozen=True)
class SetupResult:
    positive: list
    negative: list
    latent: dict
    job: LongMediaJob
    plan: SetupPlan
    notes: tuple[str, ...] = ()      # machine facts Setup adds (the decode stages on this machine)

    @property
    def summary(self) -> str:
        return "\n".join(self.plan.summary_lines() + self.notes)


def _image(name: str, value):
    shape = tuple(getattr(value, "shape", ()))
    if len(shape) != 4 or shape[0] < 1 or shape[-1] not in (3, 4):
        raise LongMediaInputError(name, shape or type(value).__name__, "an IMAGE batch [frames, height, width, 3]",
                                  "Connect a Load Image / Load Video output.")
    return value


def _audio(name: str, value) -> tuple[object, int]:
    wave = value.get("waveform") if isinstance(value, dict) else None
    rate = value.get("sample_rate") if isinstance(value, dict) else None
    if getattr(wave, "ndim", 0) != 3 or isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        found = (f"waveform {tuple(wave.shape) if hasattr(wave, 'shape') else type(wave).__name__}, "
                 f"sample_rate {rate!r}") if isinstance(value, dict) else type(value).__name__
        raise LongMediaInputError(name, found, "an AUDIO {'waveform': [batch, channels, samples], "
                                  "'sample_rate': int}", "Connect a Load Audio output.")
    if wave.shape[-1] < 1:
        raise LongMediaInputError(name, "0 samples (0 s of audio)", "an AUDIO with at least one sample",
                                  f"Connect a non-empty clip to {name}, or disconnect it.")
    return wave, rate


def _ram_available() -> int:
    import psutil  # a ComfyUI requirement

    return int(psutil.virtual_memory().available)


def media_inputs(refs: dict) -> tuple[MediaInput, ...]:
    """MediaInput descriptions of the connected reference inputs (None = not connected)."""
    unknown = sorted(set(refs) - set(REFERENCE_INPUTS))
    if unknown:
        raise LongMediaInputError(unknown[0], "given", "one of " + ", ".join(REFERENCE_INPUTS), "Rename the input.")
    out = []
    for name in REFERENCE_INPUTS:
        value = refs.get(name)
        if value is None or name.startswith(SOUNDTRACK_PREFIX):
            continue
        if name.startswith("ref_audio_"):
            wave, rate = _audio(name, value)
            out.append(MediaInput(name, "audio", seconds=wave.shape[-1] / rate))
            continue
        frames, height, width = _image(name, value).shape[:3]
        kind = "video" if name.startswith("ref_video_") else "picture"
        sound = refs.get(f"{SOUNDTRACK_PREFIX}{name.rsplit('_', 1)[-1]}") if kind == "video" else None
        seconds = 0.0
        if sound is not None:
            wave, rate = _audio(f"{SOUNDTRACK_PREFIX}{name.rsplit('_', 1)[-1]}", sound)
            seconds = wave.shape[-1] / rate
        out.append(MediaInput(name, kind, int(width), int(height), int(frames), soundtrack_seconds=seconds))
    check_soundtracks(tuple(m.slot for m in out if m.kind == "video"),
                      tuple(int(n.rsplit("_", 1)[-1]) for n in REFERENCE_INPUTS
                            if n.startswith(SOUNDTRACK_PREFIX) and refs.get(n) is not None))
    return tuple(out)


def _trim_audio(audio: dict, seconds: float | None) -> dict:
    if seconds is None:
        return audio
    keep = max(1, round(seconds * audio["sample_rate"]))
    return {**audio, "waveform": audio["waveform"][..., :keep]}


def prepared_references(refs: dict, plan: SetupPlan) -> dict[str, dict]:
    """The stock node's ref_images / ref_videos / ref_video_audios / ref_audios dicts, with the plan applied."""
    import comfy.utils

    out: dict[str, dict] = {"ref_images": {}, "ref_videos": {}, "ref_video_audios": {}, "ref_audios": {}}
    for prep in plan.preps:
        value = refs[prep.name]
        if prep.kind == "audio":
            out["ref_audios"][prep.name] = _trim_audio(value, prep.keep_seconds)
            continue
        frames = value[:1] if prep.kind == "picture" else value[:prep.keep_frames]
        if prep.resize_to is not None:
            rgb = frames[..., :3].movedim(-1, 1)  # [B, H, W, C] -> [B, 3, H, W], as the stock node resizes
            frames = comfy.utils.common_upscale(rgb, prep.resize_to[0], prep.resize_to[1], "lanczos",
                                                "disabled").movedim(1, -1)
        out["ref_images" if prep.kind == "picture" else "ref_videos"][prep.name] = frames
        if prep.soundtrack:
            out["ref_video_audios"][prep.soundtrack] = _trim_audio(refs[prep.soundtrack], prep.keep_soundtrack_seconds)
    return out


def _rows(name: str, conditioning) -> int:
    """Prompt rows of a CONDITIONING input, or a LongMediaInputError naming that input."""
    try:
        return text_rows(conditioning)
    except LongMediaInputError as error:  # named: text_rows names a generic 'conditioning'
        raise LongMediaInputError(name, error.value, error.allowed, "Connect a text encoder's CONDITIONING.") from error


def _prompt_tokens(clip, prompt: str) -> int:
    tokens = clip.tokenize(prompt)
    return len(next(iter(tokens.values()))[0])


def _longest_prompt_tokens(clip, prompt: str, segment_prompts: str) -> int:
    """Tokens of the longest prompt a segment can get: every segment_prompts entry, and the prompt box when some
    segment may use it (no entries, or a schedule that starts after 0 s)."""
    entries = parse_segment_prompts(segment_prompts)
    named = [(f"segment_prompts line {e.line}", e.text) for e in entries]
    if not entries or entries[0].seconds not in (None, 0.0):
        named.append(("prompt", prompt))
    longest = 0
    for name, text in named:   # each prompt checked by name: the one to shorten is the one the message names
        tokens = _prompt_tokens(clip, text)
        if tokens > MAX_TEXT_TOKENS:
            raise LongMediaInputError(name, f"{text[:40]}... ({len(text)} characters, {tokens} tokens)",
                                      f"a prompt of at most {MAX_TEXT_TOKENS} tokens", "Shorten this prompt.")
        longest = max(longest, tokens)
    return longest


class _PresentingClip:
    """Setup's clip as the stock H3 node uses it, remembering how it presented the frames or references to Qwen
    (the keywords of its `tokenize` call), so every segment prompt is encoded with the same presentation."""

    def __init__(self, clip) -> None:
        self.clip = clip
        self.presentation: dict = {}

    def tokenize(self, text, **kwargs):
        self.presentation = dict(kwargs)
        return self.clip.tokenize(text, **kwargs)

    def __getattr__(self, name):   # only for names this class lacks: the rest is the clip's
        if name == "clip":
            raise AttributeError(name)
        return getattr(self.clip, name)

    def encode(self, text: str):
        """CONDITIONING of `text`, presented as the stock node presented segment 0's prompt (text only: the
        guides and references stay on Setup's positive)."""
        return self.clip.encode_from_tokens_scheduled(self.clip.tokenize(text, **self.presentation))


def _segment_prompts(texts: tuple[str, ...], first_cond, encode) -> SegmentPrompts:
    """Every segment's CONDITIONING: segment 0's prompt (and any segment repeating it) is Setup's positive itself;
    each other distinct prompt is encoded once."""
    encoded = {texts[0]: first_cond}
    for text in texts:
        if text not in encoded:
            encoded[text] = encode(text)
    return SegmentPrompts(texts, tuple(encoded[t] for t in texts))


def run_setup(positive, negative, *, width: int, height: int, seconds: float, family: str = "t2va",
              reference_budget: str = "low", segment_seconds: float = 0.0, context_frames: int = 22,
              ref_image_size: str = "match", clip=None, prompt: str = "", vae=None, audio_vae=None,
              first_frame=None, last_frame=None, references: dict | None = None,
              segment_prompts: str = "", device_profile: DeviceProfile | None = None) -> SetupResult:
    """Validate everything, then build conditioning, the whole job's AV latent and the LongMediaJob.

    segment_prompts: a prompt per segment (a list, or a `0s: ...` schedule; `segments/prompts.py`), encoded by
    `clip`; Setup's positive is segment 0's, and the job carries every segment's (`LongMediaJob.prompts`).
    device_profile: the machine the whole job is planned on (`machine_check`; tests and benches stand in a card and
    RAM here); None: this one (`machine_device`)."""
    import comfy_extras.nodes_minimax_h3 as h3

    _rows("negative", negative)
    if (positive is None) == (clip is None):
        raise LongMediaInputError("positive", "connected" if positive is not None else None,
                                  "exactly one conditioning source: positive, or clip + prompt",
                                  "Connect positive from CLIPTextEncode, or the CLIP (and type the prompt), not both.")
    refs = dict(references or {})
    for name, image in (("first_frame", first_frame), ("last_frame", last_frame)):
        if image is not None:
            _image(name, image)
    request = SetupRequest(
        width=width, height=height, seconds=seconds, family=family, reference_budget=reference_budget,
        segment_seconds=segment_seconds, context_frames=context_frames, ref_image_size=ref_image_size,
        prompt_tokens=_rows("positive", positive) if clip is None else _longest_prompt_tokens(clip, prompt,
                                                                                             segment_prompts),
        conditioning="positive" if clip is None else "clip", first_frame=first_frame is not None,
        last_frame=last_frame is not None, references=media_inputs(refs), have_vae=vae is not None,
        have_audio_vae=audio_vae is not None, unused_prompt=clip is None and bool(prompt.strip()),
        ram_available_bytes=_ram_available(), prompt=prompt, segment_prompts=segment_prompts)
    plan = plan_setup(request)
    notes = machine_check(plan, device_profile if device_profile is not None else machine_device())
    if plan.prompts is not None:
        prompt = plan.prompts[0]
        clip = _PresentingClip(clip)
    with phase("job_latent", reader=comfy_reading()):   # counted above; RAM can still run out meanwhile
        latent, _ = h3._empty_av_latent(width, height, plan.total_frames)
    if plan.segments is not None and plan.segments.count > 1:   # which job's segments: Hi-Res and the Refiner check
        latent[LATENT_SEGMENTS_KEY] = plan.segments.signature()
    if family == "ref2va":
        # keywords: ComfyUI 0.38 made vae/audio_vae optional and moved them after ref_image_size
        cond = h3.MiniMaxH3ReferenceToVideo.execute(clip=clip, vae=vae, audio_vae=audio_vae, prompt=prompt, width=width,
                                                    height=height, length=plan.pass_frames, ref_image_size=ref_image_size,
                                                    **prepared_references(refs, plan)).result[0]
    elif family == "fl2va" and clip is not None:
        cond = h3.MiniMaxH3ImageToVideo.execute(clip, vae, prompt, width, height, plan.total_frames,
                                                first_frame=first_frame, last_frame=last_frame).result[0]
    elif clip is not None:
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(prompt))   # what CLIPTextEncode does
    else:
        cond = positive
        for image, index in ((first_frame, 0), (last_frame, -1)):
            if image is not None:
                cond = h3.MiniMaxH3AddGuide.execute(cond, latent, index, vae=vae, image=image).result[0]
    job = plan.job()
    if plan.prompts is not None:
        job = dataclasses.replace(job, prompts=_segment_prompts(plan.prompts, cond, clip.encode))
    return SetupResult(cond, negative, latent, job, plan, notes)


def machine_device() -> DeviceProfile | None:
    """This machine as the Sampler plans on it after its residency boundary, modelled as `python -m longmedia plan
    --vram-gb` models the card: its VRAM less the CUDA context and what ComfyUI holds (`DeviceProfile.card`,
    `COMFYUI_HELD_BYTES`), not what other models hold now (the boundary releases them); the host RAM available now
    with ComfyUI's pins counted (`pass_plan.with_pins_available`). None where ComfyUI does not run on a CUDA card."""
    import comfy.model_management
    import torch

    from .host.memory import dynamic_vram_active
    from .passes.pass_plan import with_pins_available

    load = torch.device(comfy.model_management.get_torch_device())
    if load.type != "cuda":
        return None
    found = DeviceProfile.detect(load, dynamic_vram=dynamic_vram_active())
    held = context_bytes(found.os_name) + COMFYUI_HELD_BYTES
    return with_pins_available(dataclasses.replace(found, vram_free_bytes=max(0, found.vram_total_bytes - held),
                                                   allocator_reserved_bytes=0))


def machine_check(plan: SetupPlan, device: DeviceProfile | None) -> tuple[str, ...]:
    """Setup's preflight on this machine, before the job latent is allocated: the whole-job plan
    (`setup_job.machine_job`: `plan_job`, as `python -m longmedia plan` plans it) refused where a stage does not fit
    the host RAM (`preflight.check_job_fits`), else its verdict as a note (a WARNING where VRAM is short); then
    stock decode's note. `device`: None without
    a CUDA card (a CPU run holds the weights in RAM and plans from it in the Sampler)."""
    from ..planning.setup_job import decode_note, job_note, machine_job
    from .host.memory import pinned_memory_enabled

    if device is None:
        return ("whole job not planned: no GPU (a CPU run holds the weights in RAM)",
                decode_note(plan.geometry, DeviceProfile.detect()))
    job = machine_job(plan.geometry, device, pinned_memory_enabled())
    check_job_fits(job, plan.request.seconds)
    return job_note(job), decode_note(plan.geometry, device)
