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
import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Callable

import torch

from ..report.memory import RamFacts
from .decode_inputs import CRF_AUTO, check_decode_inputs
from .encode_ahead import EncodeAhead
from .host.ram import HostRamGuard, comfy_ram_facts

CHUNKED = "chunked"                 # the H3 VAE's temporal chunks stream into the writer
STOCK_DECODE = "stock_decode"       # named fallback: the VAE has no chunked io, VAE.decode holds the whole video
PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class DecodeSaveReport:
    """What Decode & Save wrote and what it held in RAM (JSON for the node's `report` output)."""

    filename: str
    subfolder: str
    frames: int
    width: int
    height: int
    fps: float
    bit_depth: int
    crf: float
    decode_path: str                 # CHUNKED or STOCK_DECODE
    chunks: int                      # writes the decoder made (one per temporal chunk, plus the last overlap)
    largest_chunk_frames: int
    largest_chunk_bytes: int         # host bytes of the largest chunk of frames held at once
    whole_video_bytes: int           # what stock VAEDecode holds: every frame as float32 in RAM
    audio_samples: int               # per channel, after the cut to the video's length (0: no audio)
    audio_bytes: int                 # the decoded waveform, whole, in RAM during the decode
    seconds: float
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self) | {"notes": list(self.notes)}

    def summary_lines(self) -> list[str]:
        mib = 2 ** 20
        held = ("one chunk at a time" if self.decode_path == CHUNKED else "the whole video (stock decode fallback)")
        return [f"saved {self.subfolder + '/' if self.subfolder else ''}{self.filename}: {self.frames} frames "
                f"{self.width}x{self.height} at {self.fps:g} fps in {self.seconds:.1f} s",
                f"RAM held {held}: largest {self.largest_chunk_frames} frames = "
                f"{self.largest_chunk_bytes / mib:.0f} MiB (stock VAEDecode: {self.whole_video_bytes / mib:.0f} MiB); "
                f"audio {self.audio_bytes / mib:.1f} MiB", *self.notes]


@dataclass(frozen=True)
class DecodeSaveResult:
    path: str
    video: object                    # ComfyUI's VideoFromFile of the written file (None on a host without it)
    report: DecodeSaveReport


@dataclass(frozen=True)
class ChunkWritten:
    """One chunk the decoder finished: frames [start, stop) of `total`."""

    start: int
    stop: int
    total: int
    host_bytes: int


# --- the sink stock decode writes into ----------------------------------------------------------------------------

class ChunkSink:
    """Stands where `VAE.decode` passes its preallocated video: [1, 3, T, H, W], written in order, chunk by chunk.

    Each write is converted to `dtype` on the host (stock's `copy_` into its buffer on the intermediate device)
    and handed to `consume` as frames [n, H, W, 3] (stock's `movedim(1, -1)`); nothing is kept after it.
    """

    def __init__(self, shape, dtype: torch.dtype, consume: Callable[[torch.Tensor], None],
                 on_chunk: Callable[[ChunkWritten], None], check_cancel: Callable[[], None],
                 ready: Callable[[], None] = lambda: None, room: Callable[[int], object] = lambda n: None):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self._consume, self._on_chunk, self._check_cancel, self._ready = consume, on_chunk, check_cancel, ready
        self._room = room  # called with a chunk's host bytes before it is copied there (host_ram: pins freed)
        self.written = 0
        self.chunks = 0
        self.largest_frames = 0
        self.largest_bytes = 0

    def __getitem__(self, index) -> "_Window":
        if not (isinstance(index, tuple) and len(index) == 5 and all(isinstance(s, slice) for s in index)
                and all(s == slice(None) for i, s in enumerate(index) if i != 2) and index[2].step is None):
            raise TypeError(f"ChunkSink takes [:, :, a:b, :, :] writes, as MiniMaxH3VideoVAE.decode_temporal makes; "
                            f"got {index!r}")
        start, stop, _ = index[2].indices(self.shape[2])
        return _Window(self, start, stop)

    def copy_(self, src: torch.Tensor) -> "ChunkSink":
        self.write(0, src)
        return self

    def write(self, start: int, src: torch.Tensor) -> None:
        if start != self.written:
            raise RuntimeError(f"the VAE wrote frames from {start} after {self.written} were written: its chunked io "
                               "no longer writes in order, which Decode & Save relies on")
        if src.ndim != 5 or src.shape[0] != 1 or tuple(src.shape[3:]) != tuple(self.shape[3:]):
            raise RuntimeError(f"the VAE wrote a {tuple(src.shape)} chunk into a {tuple(self.shape)} video")
        self._check_cancel()
        self._ready()                  # the chunk before is written: one chunk of frames in RAM, never two
        self._room(src.numel() * torch.tensor([], dtype=self.dtype).element_size())
        host = src.to(device="cpu", dtype=self.dtype)
        n = host.shape[2]
        self.chunks += 1
        self.largest_frames = max(self.largest_frames, n)
        self.largest_bytes = max(self.largest_bytes, host.numel() * host.element_size())
        self._consume(host[0].movedim(0, -1))
        self.written += n
        self._on_chunk(ChunkWritten(start, self.written, self.shape[2], host.numel() * host.element_size()))
        del host


class _Window:
    def __init__(self, sink: ChunkSink, start: int, stop: int):
        self._sink, self._start, self._stop = sink, start, stop
        self.shape = torch.Size((*sink.shape[:2], stop - start, *sink.shape[3:]))

    def copy_(self, src: torch.Tensor) -> "_Window":
        if src.shape[2] != self._stop - self._start:
            raise RuntimeError(f"the VAE wrote {src.shape[2]} frames into a window of {self._stop - self._start}")
        self._sink.write(self._start, src)
        return self


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


# --- the mp4 writer (stock VideoFromComponents.save_to, frame by frame) --------------------------------------------

class Mp4Writer:
    """An mp4 as stock `VideoFromComponents.save_to` writes it, fed frames as they are decoded."""

    def __init__(self, path: str, *, width: int, height: int, total_frames: int, fps: float, bit_depth: int,
                 crf: float | None, audio: dict | None, metadata: dict | None):
        import av

        self._av = av
        self.is_10bit = bit_depth >= 10
        self.pix_fmt = "yuv420p10le" if self.is_10bit else "yuv420p"
        self.frame_rate = Fraction(round(fps * 1000), 1000)
        # save_to's open: mp4 (named: the .partial name has no extension), faststart, metadata tags
        self.container = av.open(path, mode="w", format="mp4",
                                 options={"movflags": "use_metadata_tags+faststart"})
        for key, value in (metadata or {}).items():
            self.container.metadata[key] = json.dumps(value)
        self.video = self.container.add_stream("h264", rate=self.frame_rate)
        self.video.width, self.video.height, self.video.pix_fmt = width, height, self.pix_fmt
        if crf is not None:
            self.video.options = {"crf": str(crf)}
        self.audio_stream = None
        self.frames_written = 0
        self.samples_written = 0
        self.waveform = None
        if audio is not None:
            self.sample_rate = int(audio["sample_rate"])
            wave = audio["waveform"]
            self.waveform = wave[0, :, :math.ceil((self.sample_rate / self.frame_rate) * total_frames)]
            self.layout = {1: "mono", 2: "stereo", 6: "5.1"}.get(self.waveform.shape[0], "stereo")
            self.audio_stream = self.container.add_stream("aac", rate=self.sample_rate, layout=self.layout)

    def write_frames(self, frames: torch.Tensor) -> None:
        """Frames [n, H, W, 3] in [0, 1], converted as save_to converts them; then the audio up to their end."""
        av = self._av
        for frame in frames:
            if self.is_10bit:
                img = (frame.float() * 65535).clamp(0, 65535).cpu().numpy().astype("uint16")
                vf = av.VideoFrame.from_ndarray(img, format="rgb48le")
            else:
                img = (frame * 255).clamp(0, 255).byte().cpu().numpy()
                vf = av.VideoFrame.from_ndarray(img, format="rgb24")
            self.container.mux(self.video.encode(vf.reformat(format=self.pix_fmt)))
            self.frames_written += 1
        self._write_audio(math.ceil((self.sample_rate / self.frame_rate) * self.frames_written)
                          if self.waveform is not None else 0)

    def _write_audio(self, until: int) -> None:
        if self.waveform is None:
            return
        until = min(until, self.waveform.shape[1])
        if until <= self.samples_written:
            return
        piece = self.waveform[:, self.samples_written:until]
        af = self._av.AudioFrame.from_ndarray(piece.float().cpu().contiguous().numpy(), format="fltp",
                                              layout=self.layout)
        af.sample_rate = self.sample_rate
        af.pts = self.samples_written
        self.container.mux(self.audio_stream.encode(af))
        self.samples_written = until

    def finish(self) -> None:
        self.container.mux(self.video.encode(None))
        if self.audio_stream is not None:
            self._write_audio(self.waveform.shape[1])
            self.container.mux(self.audio_stream.encode(None))
        self.container.close()

    def abort(self) -> None:
        self.container.close()


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
