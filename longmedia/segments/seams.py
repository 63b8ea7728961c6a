"""Seams of a segmented job, without ComfyUI: slicing passes out of the job latent, context guides, assembly.

Tensors are the two H3 streams: video [1, 24, T, h, w] and audio [1, 32, 2, Ta]. A `SegmentPlan`
(`segments.py`) says where every pass sits on the job's timeline; these helpers only cut and paste
along the time axes (video dim 2, audio dim -1), so they work on any dtype and device.

* `pass_latents`: a pass's slice of the job latent (zeros of an empty job latent = the pass's empty latent).
* `context_keyframe`: the previous passes' final latents of a pass's context frames, as an H3 guide
  (`minimax_keyframes` entry at frame 0, video and audio, the shape MiniMaxH3AddGuide stores).
* `route_keyframes`: the user's own keyframes (indexed on the job's timeline) moved into the pass holding them.
* `place` / `assemble`: the new content of every pass (context prefix dropped) into one continuous latent.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..errors import LongMediaInputError
from ..h3 import lattice as L
from ..limits import MAX_PASS_SEED, MAX_SEED
from .timeline import Segment, SegmentPlan

__all__ = ["SeamError", "job_latent_shapes", "pass_latents", "new_content",
           "context_latents", "context_keyframe", "route_keyframes", "check_pass_output", "empty_result",
           "place", "assemble", "segment_seeds", "parse_segment_seeds"]


class SeamError(RuntimeError):
    """A pass came back with other shapes than its plan (a sampler or model changed the latent's length)."""


def job_latent_shapes(plan: SegmentPlan, latent_h: int, latent_w: int,
                      video_channels: int = 24, audio_channels: int = 32) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Video and audio shapes of the whole job's latent (what EmptyMiniMaxH3LatentAV gives for its frames)."""
    return ((1, video_channels, plan.video_latent_frames, latent_h, latent_w),
            (1, audio_channels, 2, plan.audio_latent_frames))


def pass_latents(segment: Segment, video: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pass's own latents (context included), cut from the job latent (copies)."""
    (va, vb), (aa, ab) = segment.pass_latent_range, segment.pass_audio_range
    return video[:, :, va:vb].clone(), audio[..., aa:ab].clone()


def new_content(segment: Segment, video: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The part of a pass's output that lands in the result (its context prefix dropped); views."""
    (va, vb), (aa, ab) = segment.new_latent_slice, segment.new_audio_slice
    return video[:, :, va:vb], audio[..., aa:ab]


def context_latents(segment: Segment, video: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The context of `segment` cut from the (partly) assembled job latents: the previous pass's final latents."""
    if segment.context_frames == 0:
        raise ValueError(f"segment {segment.index} has no context (it is the first pass)")
    (va, vb), (aa, ab) = segment.context_latent_range, (segment.audio_start, segment.audio_new_start)
    return video[:, :, va:vb].clone(), audio[..., aa:ab].clone()


def context_keyframe(segment: Segment, video: torch.Tensor, audio: torch.Tensor) -> dict:
    """The context as an H3 guide at pass frame 0: {"resolved_frame_index": 0, "latent", "audio_latent"}.

    `video` / `audio` are the assembled job latents holding at least the previous passes.
    """
    ctx_video, ctx_audio = context_latents(segment, video, audio)
    return {"resolved_frame_index": 0, "latent": ctx_video, "audio_latent": ctx_audio}


def _keyframe_frames(keyframe: Mapping) -> int:
    """Pixel frames a keyframe's video covers (1 for a picture or an audio-only guide)."""
    latent = keyframe.get("latent")
    return L.pixel_frames(latent.shape[2]) if latent is not None else 1


def _owner(plan: SegmentPlan, frame: int) -> Segment:
    """The pass whose new frames hold pixel frame `frame` of the job."""
    for seg in plan.segments:
        if seg.new_start <= frame < seg.pass_end:
            return seg
    raise LongMediaInputError("minimax_keyframes", frame, f"a frame index from 0 to {plan.pixel_frames - 1}",
                              "Anchor guides inside the job's frames (MiniMaxH3AddGuide frame_idx).")


def route_keyframes(plan: SegmentPlan, keyframes: Sequence[Mapping] | None) -> tuple[tuple[dict, ...], ...]:
    """The user's guides per pass: each goes to the pass whose new frames hold its first frame, re-indexed.

    A guide clip must end inside that pass; audio is cut to the pass's remaining audio (as
    MiniMaxH3AddGuide cuts it to the video's). Keys other than the index and the audio are kept as given.
    """
    routed: list[list[dict]] = [[] for _ in plan.segments]
    for i, kf in enumerate(keyframes or ()):
        frame = kf.get("resolved_frame_index")
        if isinstance(frame, bool) or not isinstance(frame, int):
            raise LongMediaInputError(f"minimax_keyframes[{i}].resolved_frame_index", frame,
                                      "an integer frame of the job", "Build guides with MiniMaxH3AddGuide.")
        seg = _owner(plan, frame)
        local, span = frame - seg.pass_start, _keyframe_frames(kf)
        if local + span > seg.pass_frames:
            raise LongMediaInputError(
                f"minimax_keyframes[{i}]", f"{span} frames at frame {frame}",
                f"a guide inside one segment: segment {seg.index} holds frames [{seg.new_start}, {seg.pass_end})",
                "Move the guide, shorten the guide clip, or change segment_seconds so it fits in one segment.")
        out = dict(kf, resolved_frame_index=local)
        audio = kf.get("audio_latent")
        if audio is not None:
            max_rt = (3 * seg.audio_frames - 5 * local) // 3    # floor(audio_frames - 5/3 * local), exact
            if max_rt < 1:
                raise LongMediaInputError(f"minimax_keyframes[{i}]", f"audio at frame {frame}",
                                          f"audio that starts before the end of segment {seg.index}'s track",
                                          "Anchor the audio earlier.")
            if audio.shape[-1] > max_rt:
                out["audio_latent"] = audio[..., :max_rt].clone()
        routed[seg.index].append(out)
    return tuple(tuple(r) for r in routed)


def check_pass_output(segment: Segment, video: torch.Tensor, audio: torch.Tensor) -> None:
    """Raise SeamError unless a pass's output has the pass's latent and audio lengths."""
    if video.shape[2] != segment.latent_frames or audio.shape[-1] != segment.audio_frames:
        raise SeamError(f"segment {segment.index} came back with video {tuple(video.shape)} and audio "
                        f"{tuple(audio.shape)}; its plan has {segment.latent_frames} video and {segment.audio_frames} "
                        "audio latent frames. A node between the latent and the sampler changed the length; "
                        "report this with the workflow.")


def empty_result(plan: SegmentPlan, video: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed job latents with the spatial size, channels, dtype and device of a pass's outputs."""
    want_v, want_a = job_latent_shapes(plan, video.shape[3], video.shape[4], video.shape[1], audio.shape[1])
    return (torch.zeros(want_v, dtype=video.dtype, device=video.device),
            torch.zeros(want_a, dtype=audio.dtype, device=audio.device))


def place(segment: Segment, result: tuple[torch.Tensor, torch.Tensor], video: torch.Tensor,
          audio: torch.Tensor) -> None:
    """Write a pass's new content (context dropped) into the job latents `result` (in place)."""
    check_pass_output(segment, video, audio)
    new_v, new_a = new_content(segment, video, audio)
    (va, vb), (aa, ab) = segment.video_latent_range, segment.audio_range
    result[0][:, :, va:vb] = new_v.to(result[0].dtype)
    result[1][..., aa:ab] = new_a.to(result[1].dtype)


def assemble(plan: SegmentPlan, passes: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One continuous (video, audio) latent from every pass's output, in plan order."""
    if len(passes) != plan.count:
        raise ValueError(f"{len(passes)} pass outputs for a plan of {plan.count} segments")
    result = empty_result(plan, *passes[0])
    for seg, (video, audio) in zip(plan.segments, passes):
        place(seg, result, video, audio)
    return result


def segment_seeds(count: int, seed: int, pinned: Sequence[int | None] | None = None, *,
                  name: str = "seeds") -> tuple[int, ...]:
    """Seeds of `count` passes: `pinned[i]` for pass i where given (None: derived), else the noise's seed for
    pass 0 (as stock sampling uses it) and seed + index for later passes, wrapped into [0, MAX_PASS_SEED]
    (mod 2**64 - 1) so seed + 1 stays a seed. `name`: the input the pinned seeds came from, for errors."""
    pinned = tuple(pinned or ())
    if len(pinned) > count:
        raise LongMediaInputError(name, pinned, f"at most {count} pinned seeds (one per segment)",
                                  "Drop the extra seeds.")
    for i, s in enumerate(pinned):   # every pinned seed, the first pass's too: ComfyUI overflows on MAX_SEED there
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_PASS_SEED):
            raise LongMediaInputError(f"{name}[{i}]", s, f"an integer from 0 to {MAX_PASS_SEED}",
                                      "Use ComfyUI seeds; a pinned seed must leave room for ComfyUI's seed + 1.")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise LongMediaInputError("noise_seed", seed, f"an integer from 0 to {MAX_SEED}", "Use a RandomNoise seed.")
    derived = tuple(seed if i == 0 else (seed + i) % (MAX_PASS_SEED + 1) for i in range(count))
    return tuple(pinned[i] if i < len(pinned) and pinned[i] is not None else derived[i] for i in range(count))


AUTO_SEED = ("auto", "-", "*")


def parse_segment_seeds(text: str, name: str = "segment_seeds") -> tuple[int | None, ...]:
    """Pinned seeds from text: one entry per segment in order, separated by commas, spaces or lines; `auto`
    (or `-`) leaves that segment's derived seed. Empty text pins nothing. Ranges are checked by `segment_seeds`."""
    if not isinstance(text, str):
        raise LongMediaInputError(name, type(text).__name__, "text such as `auto, auto, 1234`",
                                  "Type one seed or `auto` per segment.")
    out: list[int | None] = []
    for i, token in enumerate(t for t in text.replace(",", " ").split() if t):
        if token.lower() in AUTO_SEED:
            out.append(None)
        elif token.isascii() and token.isdigit() and len(token) <= len(str(MAX_PASS_SEED)):
            out.append(int(token))   # ASCII only: str.isdigit accepts "²", which int() refuses
        elif token.isascii() and token.isdigit():   # past any seed (and int() refuses 4,300 digits)
            raise LongMediaInputError(f"{name}[{i}]", token, f"a whole number from 0 to {MAX_PASS_SEED} or `auto`",
                                      "Use ComfyUI seeds; a pinned seed must leave room for ComfyUI's seed + 1.")
        else:
            raise LongMediaInputError(f"{name}[{i}]", token, "a whole number from 0 or `auto`",
                                      "Type one seed or `auto` per segment, e.g. `auto, auto, 1234`.")
    return tuple(out)
