"""Decode & Save: an H3 AV latent decoded in the video VAE's own temporal chunks and written to one mp4 as it goes.

Stock `VAEDecode` -> `CreateVideo` -> `SaveVideo` holds the whole video in host RAM as float32 frames
(`comfy.sd.VAE.decode` preallocates it as the decoder's `output_buffer`). ComfyUI's H3 video VAE
(`MiniMaxH3VideoVAE`, `comfy_has_chunked_io`) decodes 17-frame temporal chunks and writes each finished
chunk into that buffer in order (`dec[:, :, a:b].copy_(part)`, reading `dec.shape[2]`). Here the buffer is
a `ChunkSink`: it takes those writes, converts each chunk to the buffer's dtype on the host exactly as
stock's copy would, and hands the frames to the mp4 writer, so RAM holds one chunk, never the video. The writer
encodes a chunk on its own thread while the device decodes the next one (`encode_ahead`).
The decoder is stock's, so the pixels are stock's bit for bit, seams included (stock's own blend).

A VAE of H3's class without chunked io (another ComfyUI generation) takes the named fallback
`stock_decode`: `VAE.decode` as VAEDecode calls it, then the same writer (RAM holds the whole video, and
the report says so). ComfyUI's `VAEDecodeTiled` is no substitute: its temporal tiles are assembled into one
whole-video tensor too (`tiled_scale_multidim`'s output), and the H3 VAE ignores its tile options.

The file matches stock CreateVideo + SaveVideo (`VideoFromComponents.save_to`): mp4 with faststart and
metadata tags, h264 yuv420p (yuv420p10le at 10 bit), the same frame conversion, fps as a 1/1000 fraction,
AAC audio cut to the video's length. Audio is decoded whole by stock's `vae_decode_audio` (small: 8 bytes
a sample pair, 15 MiB a minute) and muxed chunk by chunk beside the video. The file is written under a short
hidden `.partial` name beside it (any prefix SaveVideo can write fits) and renamed when complete; a cancelled or
failed run removes it, even when closing the writer fails too (a full disk). The prefix is checked before any
decode, as ComfyUI's save nodes would refuse it after one: no NUL, no absolute path or `..`, a name that fits.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import torch

from ..media.chunk_sink import ChunkSink, ChunkWritten
from ..media.encode_ahead import EncodeAhead
from ..media.mp4_writer import Mp4Writer
from ..report.decode_save import CHUNKED, STOCK_DECODE, DecodeSaveReport
from ..report.memory import RamFacts
from .decode_inputs import CRF_AUTO, check_decode_inputs
from .host.ram import HostRamGuard, comfy_ram_facts

PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class DecodeSaveResult:
    path: str
    video: object                    # ComfyUI's VideoFromFile of the written file (None on a host without it)
    report: DecodeSaveReport


def _check_cancel() -> None:
    import comfy.model_management

    comfy.model_management.throw_exception_if_processing_interrupted()


def decode_video_chunks(vae, video_latent: torch.Tensor, consume: Callable[[torch.Tensor], None],
                        on_chunk: Callable[[ChunkWritten], None] = lambda c: None,
                        ready: Callable[[], None] = lambda: None,
                        room: Callable[[int], object] = lambda n: None) -> tuple[str, ChunkSink | None]:
    """Decode `video_latent` with `vae` as VAE.decode does, streaming frames [n, H, W, 3] into `consume`; `ready()`
    is called before each chunk leaves the device (for a consumer that writes in the background to finish the last),
    `room(bytes)` before its frames take host RAM (`host_ram.HostRamGuard.make_room`: ComfyUI's pins freed).

    Returns (decode path, the sink: None on the stock fallback). Cancel is checked before and at every chunk.
    """
    import comfy.model_management as mm

    vae.throw_exception_if_invalid()
    model = vae.first_stage_model
    _check_cancel()
    if not (getattr(model, "comfy_has_chunked_io", False) and hasattr(model, "decode_output_shape")):
        images = vae.decode(video_latent)                 # VAEDecode's call: [1, T, H, W, 3]
        images = images.reshape(-1, *images.shape[-3:])
        step = 17
        for a in range(0, images.shape[0], step):
            _check_cancel()
            consume(images[a:a + step])
            on_chunk(ChunkWritten(a, min(a + step, images.shape[0]), images.shape[0], images.numel() *
                                  images.element_size()))
        return STOCK_DECODE, None
    device_context = getattr(mm, "cuda_device_context", None)
    with (device_context(vae.device) if device_context is not None else contextlib.nullcontext()):
        memory_used = vae.memory_used_decode(video_latent.shape, vae.vae_dtype)
        mm.load_models_gpu([vae.patcher], memory_required=memory_used, force_full_load=vae.disable_offload)
        sink = ChunkSink(model.decode_output_shape(video_latent.shape), vae.vae_output_dtype(), consume, on_chunk,
                         _check_cancel, ready, room)
        samples = video_latent.to(device=vae.device, dtype=vae.vae_dtype)
        model.decode(samples, output_buffer=sink)
        del samples
    if sink.written != sink.shape[2]:
        raise RuntimeError(f"the VAE wrote {sink.written} of {sink.shape[2]} frames")
    return CHUNKED, sink


# --- the whole node ------------------------------------------------------------------------------------------------

def _output_path(filename_prefix: str, width: int, height: int, output_dir: str | None) -> tuple[str, str, str]:
    """(folder, file, subfolder) as SaveVideo names its file in ComfyUI's output directory (or `output_dir`)."""
    import folder_paths

    folder, filename, counter, subfolder, _ = folder_paths.get_save_image_path(
        filename_prefix, output_dir or folder_paths.get_output_directory(), width, height)
    return folder, f"{filename}_{counter:05}_.mp4", subfolder


def _video_from_file(path: str):
    try:
        from comfy_api.latest import InputImpl
    except ImportError:            # a ComfyUI without the V3 VIDEO type: the file is still written
        return None
    return InputImpl.VideoFromFile(path)


def _metadata(prompt, extra_pnginfo) -> dict | None:
    from comfy.cli_args import args

    if args.disable_metadata:
        return None
    metadata = dict(extra_pnginfo or {})
    if prompt is not None:
        metadata["prompt"] = prompt
    return metadata or None


def decode_audio(audio_vae, latent) -> dict:
    """Stock VAEDecodeAudio on the Sampler's latent (its last stream): the whole waveform, as AUDIO."""
    from comfy_extras.nodes_audio import vae_decode_audio

    _check_cancel()
    return vae_decode_audio(audio_vae, latent)


def decode_and_save(latent, video_vae, audio_vae=None, *, fps: float = 24.0, filename_prefix: str = "video/LongMedia",
                    bit_depth: int = 8, crf: float = CRF_AUTO, prompt=None, extra_pnginfo=None,
                    on_chunk: Callable[[ChunkWritten], None] | None = None,
                    output_dir: str | None = None, encode_ahead: bool | None = None,
                    ram_facts: RamFacts | None = None) -> DecodeSaveResult:
    """Decode the Sampler's AV latent chunk by chunk and save it as SaveVideo would; see the module docstring.
    `ram_facts`: how host RAM is read and ComfyUI's pins freed before each chunk (None: ComfyUI's own)."""
    video, _ = check_decode_inputs(latent, video_vae, audio_vae, fps, bit_depth, crf, filename_prefix)
    audio = decode_audio(audio_vae, latent) if audio_vae is not None else None
    return save_streamed(video, video_vae, audio, fps=fps, filename_prefix=filename_prefix, bit_depth=bit_depth,
                         crf=crf, metadata=_metadata(prompt, extra_pnginfo), on_chunk=on_chunk,
                         output_dir=output_dir, encode_ahead=encode_ahead, ram_facts=ram_facts)


def save_streamed(video, video_vae, audio: dict | None, *, fps: float, filename_prefix: str, bit_depth: int,
                  crf: float, metadata: dict | None, on_chunk: Callable[[ChunkWritten], None] | None = None,
                  output_dir: str | None = None, encode_ahead: bool | None = None,
                  ram_facts: RamFacts | None = None) -> DecodeSaveResult:
    """The video latent (checked by `check_decode_inputs`) decoded into one mp4 with `audio` (AUDIO or None).
    `encode_ahead`: encode on a thread of its own while the device decodes (None: when the VAE is not on the CPU)."""
    import comfy.model_management as mm
    import comfy.utils

    started = time.perf_counter()
    model = video_vae.first_stage_model
    frames = model.decode_output_shape(video.shape)[2] if hasattr(model, "decode_output_shape") else \
        video_vae.upscale_ratio[0](video.shape[2])
    height, width = video.shape[3] * video_vae.upscale_ratio[1], video.shape[4] * video_vae.upscale_ratio[2]
    folder, file, subfolder = _output_path(filename_prefix, width, height, output_dir)
    final = os.path.join(folder, file)
    partial = os.path.join(folder, f".longmedia_{uuid.uuid4().hex[:16]}.mp4{PARTIAL_SUFFIX}")  # short: any name fits
    writer = Mp4Writer(partial, width=width, height=height, total_frames=frames, fps=fps, bit_depth=bit_depth,
                       crf=None if crf == CRF_AUTO else crf, audio=audio, metadata=metadata)
    bar = comfy.utils.ProgressBar(frames)

    def chunk_done(chunk: ChunkWritten) -> None:
        bar.update_absolute(chunk.stop, frames)
        if on_chunk is not None:
            on_chunk(chunk)

    done = False
    # on a GPU the device decodes chunk k+1 while chunk k is encoded; on the CPU the writer runs inline
    ahead = EncodeAhead(writer.write_frames, threaded=encode_ahead if encode_ahead is not None else
                        torch.device(getattr(video_vae, "device", "cpu")).type != "cpu")
    # a chunk's frames and the writer's copy of the one before it: room for both before each chunk lands in RAM
    host = HostRamGuard(ram_facts if ram_facts is not None else comfy_ram_facts(), pin_budget=None)
    try:
        path, sink = decode_video_chunks(video_vae, video, ahead, chunk_done, ready=ahead.wait,
                                         room=lambda n: host.make_room(2 * n, "a decoded chunk moves to host RAM"))
        ahead.finish()
        _check_cancel()
        writer.finish()
        os.replace(partial, final)
        done = True
    finally:
        if not done:
            try:
                ahead.discard()
                writer.abort()   # may fail again on a full disk: the file goes all the same
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(partial)
                mm.soft_empty_cache()
    audio_bytes = 0 if audio is None else audio["waveform"].numel() * audio["waveform"].element_size()
    whole = frames * height * width * 3 * torch.tensor([], dtype=video_vae.vae_output_dtype()).element_size()
    notes = () if path == CHUNKED else (
        f"{STOCK_DECODE}: this VAE has no chunked io (comfy_has_chunked_io), so ComfyUI's VAE.decode held the "
        "whole video in RAM; the file was still written as it would be",)
    if audio is None:
        notes += ("no audio_vae connected: the file has no audio track",)
    freed = [e for e in host.events if e.freed_pin_bytes]
    if freed:
        notes += (f"host RAM: {len(freed)} chunk(s) found RAM short; {sum(e.freed_pin_bytes for e in freed) / 2**30:.2f}"
                  f" GiB of ComfyUI's pins freed before them (the first: {freed[0].line()})",)
    report = DecodeSaveReport(
        filename=file, subfolder=subfolder, frames=writer.frames_written, width=width, height=height, fps=fps,
        bit_depth=bit_depth, crf=crf, decode_path=path, chunks=sink.chunks if sink else math.ceil(frames / 17),
        largest_chunk_frames=sink.largest_frames if sink else frames,
        largest_chunk_bytes=sink.largest_bytes if sink else whole, whole_video_bytes=whole,
        audio_samples=writer.samples_written, audio_bytes=audio_bytes, seconds=time.perf_counter() - started,
        notes=notes)
    return DecodeSaveResult(final, _video_from_file(final), report)
