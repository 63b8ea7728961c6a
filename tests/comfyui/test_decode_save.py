"""LongMedia Decode & Save against ComfyUI's own H3 VAEs, in-process on the CPU.

The VAEs are ComfyUI's classes at tiny size inside ComfyUI's own `comfy.sd.VAE` wrapper
(`longmedia.testing.tiny_vae`): stock `VAEDecode`, `VAEDecodeAudio`, `CreateVideo` and `SaveVideo`'s writer
run on the same objects, so every comparison here is against stock code on the same latent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from bench.cards.comfy_process import child_env
from longmedia.errors import LongMediaInputError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAT_T, LAT_H, LAT_W = 17, 4, 20           # 56 frames (3 temporal chunks + the last overlap), 64x320 px (2 tiles)
AUDIO_T = 93                              # 56 frames at 24 fps = 2.33 s = 93 latent frames at 40 Hz


@pytest.fixture(scope="module")
def vaes(comfy_inprocess):
    import comfy.sd
    from comfy.ldm.minimax import audio_vae, vae

    from longmedia.testing.tiny_vae import tiny_audio_vae, tiny_video_vae

    return tiny_video_vae(comfy.sd, vae, seed=1), tiny_audio_vae(comfy.sd, audio_vae, seed=2)


def av_latent(seed: int, t: int = LAT_T, h: int = LAT_H, w: int = LAT_W, audio_t: int = AUDIO_T) -> dict:
    import comfy.nested_tensor

    g = torch.Generator().manual_seed(seed)
    video = torch.randn(1, 24, t, h, w, generator=g)
    audio = torch.randn(1, 32, 2, audio_t, generator=g)
    return {"samples": comfy.nested_tensor.NestedTensor((video, audio)), "type": "audio_video"}


def stock_images(video_vae, latent) -> torch.Tensor:
    import nodes

    return nodes.VAEDecode().decode(video_vae, latent)[0]


def streamed_frames(video_vae, latent) -> tuple[torch.Tensor, list]:
    from longmedia.comfy.decode_save import decode_video_chunks
    from longmedia.report.decode_save import CHUNKED

    parts, chunks = [], []
    video = latent["samples"].unbind()[0]
    path, sink = decode_video_chunks(video_vae, video, lambda f: parts.append(f.clone()), chunks.append)
    assert path == CHUNKED and sink.written == sum(p.shape[0] for p in parts)
    return torch.cat(parts), chunks


def test_streamed_frames_equal_stock_vae_decode_bit_for_bit(vaes):
    video_vae, _ = vaes
    latent = av_latent(seed=11)
    stock = stock_images(video_vae, latent)
    ours, chunks = streamed_frames(video_vae, latent)
    assert stock.shape == ours.shape == (56, 64, 320, 3) and stock.dtype == ours.dtype
    assert stock.std() > 0.02, "the tiny VAE should make varied pixels, else equality proves little"
    assert torch.equal(ours, stock)
    assert [(c.start, c.stop) for c in chunks] == [(0, 17), (17, 34), (34, 51), (51, 56)]
    # seams: the step between the last frame of a chunk and the next, against steps inside chunks (stock's blend)
    steps = (ours[1:] - ours[:-1]).abs().mean(dim=(1, 2, 3))
    seam = steps[[16, 33, 50]]
    inside = steps[[i for i in range(len(steps)) if i not in (16, 33, 50)]]
    print(f"seam step {seam.tolist()} vs inside mean {inside.mean():.4f} (min {inside.min():.4f}, max "
          f"{inside.max():.4f}); frames equal stock's, so the seams are stock's own blend")
    assert seam.max() <= inside.max(), "a chunk seam should be no harsher than a step inside a chunk"


def _read(path: Path) -> dict:
    import av

    out = {"video": [], "audio": [], "frames": [], "samples": []}
    with av.open(str(path)) as c:
        for packet in c.demux():
            if packet.size:
                out[packet.stream.type].append(bytes(packet))
    with av.open(str(path)) as c:
        out["frames"] = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        out["fps"] = c.streams.video[0].average_rate
        out["codec"] = (c.streams.video[0].codec_context.name, c.streams.video[0].codec_context.pix_fmt,
                        c.streams.audio[0].codec_context.name if c.streams.audio else None)
    with av.open(str(path)) as c:
        if c.streams.audio:
            out["samples"] = torch.cat([torch.from_numpy(f.to_ndarray()) for f in c.decode(audio=0)], dim=1)
    return out


def _no_writer_thread() -> bool:
    import threading

    return not [t for t in threading.enumerate() if t.name.startswith("longmedia-mp4")]


@pytest.mark.parametrize(("bit_depth", "encode_ahead"), [(8, False), (10, False), (8, True), (10, True)])
def test_saved_file_matches_stock_create_video_and_save_video(vaes, tmp_path, bit_depth, encode_ahead):
    """Inline (as on a CPU-only ComfyUI) and with the writer on its own thread (as on a GPU), the file is stock's."""
    from comfy_api.latest import InputImpl, Types
    from comfy_extras.nodes_audio import vae_decode_audio

    from longmedia.comfy.decode_save import decode_and_save

    video_vae, audio_vae = vaes
    latent = av_latent(seed=12)
    stock_path = tmp_path / "stock.mp4"
    components = Types.VideoComponents(images=stock_images(video_vae, latent),
                                       audio=vae_decode_audio(audio_vae, latent), frame_rate=Fraction(24.0))
    InputImpl.VideoFromComponents(components, bit_depth=bit_depth).save_to(str(stock_path))
    result = decode_and_save(latent, video_vae, audio_vae, fps=24.0, filename_prefix="video/ours",
                             bit_depth=bit_depth, output_dir=str(tmp_path), encode_ahead=encode_ahead)
    assert _no_writer_thread()
    assert Path(result.path) == tmp_path / "video" / "ours_00001_.mp4" and Path(result.path).is_file()
    assert result.report.decode_path == "chunked" and result.report.frames == 56
    assert sorted(p.name for p in (tmp_path / "video").iterdir()) == ["ours_00001_.mp4"]   # no .partial left
    stock, ours = _read(stock_path), _read(Path(result.path))
    assert ours["codec"] == stock["codec"] == ("h264", "yuv420p10le" if bit_depth == 10 else "yuv420p", "aac")
    assert ours["fps"] == stock["fps"] == 24
    assert len(ours["frames"]) == len(stock["frames"]) == 56
    assert ours["video"] == stock["video"], "the h264 stream should be stock's, packet for packet"
    assert ours["audio"] == stock["audio"], "the AAC stream should be stock's, packet for packet"
    assert torch.equal(ours["samples"], stock["samples"]) and ours["samples"].abs().max() > 0
    assert result.video.get_dimensions() == (320, 64)       # ComfyUI's VideoFromFile of the written file
    assert result.report.audio_bytes == 2 * AUDIO_T * 800 * 4 and result.report.audio_samples == AUDIO_T * 800


def test_bad_inputs_are_refused_before_any_decode(vaes, tmp_path):
    from longmedia.comfy.decode_save import decode_and_save

    video_vae, audio_vae = vaes
    latent = av_latent(seed=13)
    cases = [
        ({"latent": {"samples": torch.rand(1, 24, 7, 4, 4)}}, "latent", "H3 AV latent"),
        ({"video_vae": audio_vae}, "video_vae", "MiniMax H3 video VAE"),
        ({"audio_vae": video_vae}, "audio_vae", "MiniMax H3 audio VAE"),
        ({"fps": 0.5}, "fps", "from 1 to 120"),
        ({"fps": 240.0}, "fps", "from 1 to 120"),
        ({"bit_depth": 12}, "bit_depth", "8 or 10"),
        ({"crf": 60.0}, "crf", "from 0 to 51"),
    ]
    for change, name, allowed in cases:
        kwargs = {"latent": latent, "video_vae": video_vae, "audio_vae": audio_vae, "fps": 24.0, "bit_depth": 8,
                  "crf": -1.0} | change
        with pytest.raises(LongMediaInputError, match=allowed) as info:
            decode_and_save(kwargs.pop("latent"), kwargs.pop("video_vae"), kwargs.pop("audio_vae"),
                            filename_prefix="video/bad", output_dir=str(tmp_path), **kwargs)
        assert info.value.input_name == name and name in str(info.value)
    assert not list(tmp_path.rglob("*")), "nothing may be written for refused inputs"


@pytest.mark.parametrize("encode_ahead", [False, True])
def test_cancel_mid_decode_leaves_no_file(vaes, tmp_path, encode_ahead):
    import comfy.model_management as mm

    from longmedia.comfy.decode_save import decode_and_save

    video_vae, audio_vae = vaes
    seen = []

    def cancel_after_first(chunk):
        seen.append(chunk)
        mm.interrupt_current_processing(True)      # what the Cancel button does

    with pytest.raises(mm.InterruptProcessingException):
        decode_and_save(av_latent(seed=14), video_vae, audio_vae, filename_prefix="video/cancelled",
                        output_dir=str(tmp_path), on_chunk=cancel_after_first, encode_ahead=encode_ahead)
    assert len(seen) == 1 and seen[0].stop == 17, "the next chunk's check should have stopped it"
    assert not mm.processing_interrupted()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [], "a cancelled run leaves no file"
    assert _no_writer_thread()


def unchecked_decoder(minimax_vae, shapes_from, seed: int):
    """A decoder of ComfyUI's H3 video VAE class (Decode & Save takes no other) whose decode is plain torch: no
    ComfyUI op runs in it, so ComfyUI's per-op interrupt check (`comfy.ops.run_every_op`) never does. It writes
    seeded random pixels in 17-frame chunks, in order, into the buffer it is handed, as
    `MiniMaxH3VideoVAE.decode_temporal` does; its output shape is `shapes_from`'s (the tiny VAE's)."""

    class UncheckedDecoder(minimax_vae.MiniMaxH3VideoVAE):
        comfy_has_chunked_io = True

        def __init__(self):
            torch.nn.Module.__init__(self)          # no layers: its decode below uses none
            self.chunks_decoded = 0

        def decode_output_shape(self, input_shape):
            return shapes_from.decode_output_shape(input_shape)

        def decode(self, z, output_buffer=None):
            g = torch.Generator().manual_seed(seed)
            _, channels, frames, height, width = output_buffer.shape
            for a in range(0, frames, 17):
                part = torch.rand(1, channels, min(a + 17, frames) - a, height, width, generator=g)
                self.chunks_decoded += 1
                output_buffer[:, :, a:a + part.shape[2], :, :].copy_(part)

    return UncheckedDecoder()


def test_cancel_stops_a_decoder_that_never_checks_at_the_next_chunk(comfy_inprocess, tmp_path):
    """Decode & Save's own check at every chunk is what stops it: the decoder runs no ComfyUI op, so nothing else
    sees the Cancel before the file would be finished."""
    import comfy.model_management as mm
    import comfy.sd
    from comfy.ldm.minimax import vae

    from longmedia.comfy.decode_save import decode_and_save
    from longmedia.testing.tiny_vae import tiny_video_vae

    video_vae = tiny_video_vae(comfy.sd, vae, seed=3)         # ComfyUI's wrapper, its decoder swapped below
    decoder = unchecked_decoder(vae, video_vae.first_stage_model, seed=16)
    video_vae.first_stage_model = decoder
    video_vae.patcher = type(video_vae.patcher)(decoder, load_device=video_vae.device,
                                                offload_device=video_vae.patcher.offload_device)
    seen = []

    def cancel_after_first(chunk):
        seen.append(chunk)
        mm.interrupt_current_processing(True)      # what the Cancel button does

    try:
        with pytest.raises(mm.InterruptProcessingException):
            decode_and_save(av_latent(seed=16), video_vae, None, filename_prefix="video/cancelled",
                            output_dir=str(tmp_path), on_chunk=cancel_after_first)
    finally:
        mm.interrupt_current_processing(False)
    assert [(c.start, c.stop) for c in seen] == [(0, 17)], f"the chunks written after the Cancel: {seen[1:]}"
    assert decoder.chunks_decoded == 2, "the second chunk, decoded, is refused at the sink before it is written"
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [], "a cancelled run leaves no file"


@pytest.mark.parametrize("encode_ahead", [False, True])
def test_failed_write_leaves_no_file(vaes, tmp_path, encode_ahead):
    from longmedia.comfy.decode_save import decode_and_save

    video_vae, audio_vae = vaes

    def fail_on_second(chunk):
        if chunk.start > 0:
            raise RuntimeError("disk full (test)")

    with pytest.raises(RuntimeError, match="disk full"):
        decode_and_save(av_latent(seed=15), video_vae, audio_vae, filename_prefix="video/failed",
                        output_dir=str(tmp_path), on_chunk=fail_on_second, encode_ahead=encode_ahead)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [] and _no_writer_thread()


@pytest.mark.parametrize("prefix", ["video/a\x00b", "../escape", "video/../../escape", "/tmp/absolute",
                                    "video/" + "x" * 245])
def test_a_prefix_comfyui_would_refuse_is_refused_before_any_decode(vaes, tmp_path, monkeypatch, prefix):
    """Issue 49: NUL (raw ValueError, a complete mp4 left under a truncated name), traversal and absolute prefixes
    (refused only by ComfyUI after the audio was decoded) and a name too long for the file system: refused by name
    before the audio or any chunk is decoded; nothing written."""
    from longmedia.comfy import decode_save
    from longmedia.errors import LongMediaInputError

    def never(*args, **kwargs):
        raise AssertionError("decoding started")

    monkeypatch.setattr(decode_save, "decode_audio", never)
    with pytest.raises(LongMediaInputError) as info:
        decode_save.decode_and_save(av_latent(seed=17), *vaes, filename_prefix=prefix, output_dir=str(tmp_path))
    assert info.value.input_name == "filename_prefix" and len(str(info.value)) < 500
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_prefix_as_long_as_savevideo_writes_gets_its_file(vaes, tmp_path):
    """A 240-character name: stock SaveVideo writes it; the temporary name used to fail ("File name too long")."""
    from longmedia.comfy.decode_save import decode_and_save

    result = decode_and_save(av_latent(seed=18, t=2), vaes[0], None, filename_prefix="video/" + "n" * 240,
                             output_dir=str(tmp_path))
    assert [p.name for p in (tmp_path / "video").iterdir()] == ["n" * 240 + "_00001_.mp4"]
    assert Path(result.path).stat().st_size > 0


def test_a_full_disk_while_closing_leaves_no_partial_file(vaes, tmp_path, monkeypatch):
    """Disk full when the file is finished, and again when the writer is closed after it: the .partial goes too."""
    import errno

    from longmedia.comfy import decode_save
    from longmedia.media.mp4_writer import Mp4Writer

    real_finish = Mp4Writer.finish

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_at_the_end(self):   # the bytes are on disk, then the last write fails
        real_finish(self)
        full(self)

    monkeypatch.setattr(Mp4Writer, "finish", full_at_the_end)
    monkeypatch.setattr(Mp4Writer, "abort", full)
    with pytest.raises(OSError, match="No space left"):
        decode_save.decode_and_save(av_latent(seed=19, t=2), vaes[0], None, filename_prefix="video/full",
                                    output_dir=str(tmp_path))
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [] and _no_writer_thread()


def test_vae_without_chunked_io_takes_the_named_stock_fallback(comfy_inprocess, vaes, tmp_path):
    import comfy.sd
    from comfy.ldm.minimax import vae

    from longmedia.comfy.decode_save import decode_and_save
    from longmedia.report.decode_save import CHUNKED, STOCK_DECODE
    from longmedia.testing.tiny_vae import tiny_video_vae

    plain = tiny_video_vae(comfy.sd, vae, seed=1)               # the fixture's video VAE, weight for weight
    plain.first_stage_model.comfy_has_chunked_io = False      # this instance only: a VAE without chunked io
    latent = av_latent(seed=16, t=7, w=6)
    fallback = decode_and_save(latent, plain, None, filename_prefix="video/plain", output_dir=str(tmp_path))
    chunked = decode_and_save(latent, vaes[0], None, filename_prefix="video/chunked", output_dir=str(tmp_path))
    assert fallback.report.decode_path == STOCK_DECODE and "whole video" in fallback.report.notes[0]
    assert chunked.report.decode_path == CHUNKED and fallback.report.frames == chunked.report.frames == 22
    assert "no audio track" in fallback.report.notes[1]
    a, b = _read(Path(fallback.path)), _read(Path(chunked.path))
    assert a["video"] == b["video"] and a["codec"][2] is None, "both paths should write the same h264 stream"


# --- host RAM: a child process per run, peak RSS (VmHWM reset before the decode) ------------------------------------
# glibc's malloc keeps freed heap and raises its mmap threshold as large blocks are freed, so a peak-RSS mark
# would also count memory it merely retained; a fixed threshold (glibc's own tunable) makes every tensor above
# 128 KiB its own mapping, returned on free, so the mark follows what is alive.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _child_growth(comfyui_root: Path, tmp_path: Path, mode: str, latent_t: int) -> int:
    env = child_env(REPO, {**os.environ, **MALLOC_ENV, "LONGMEDIA_COMFYUI_ROOT": str(comfyui_root)})
    out = subprocess.run([sys.executable, "-P", str(HERE / "decode_rss_child.py"), str(comfyui_root), str(tmp_path),
                          mode, str(latent_t)], capture_output=True, text=True, timeout=600, cwd=str(REPO), env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("GROWTH ")][-1]
    return int(line.split()[1])


def test_ram_growth_is_bounded_by_one_chunk_not_the_video(comfyui_root, tmp_path):
    """A job 4x longer grows the process's peak RSS by < 1.2x with Decode & Save; stock holds the whole video.

    On the CPU the decoder's per-chunk working memory (the GPU's, on a real run) is in RSS as well: it is the
    same at every length, so the bound shows as a ratio near 1.
    """
    short_t, long_t = 17, 67              # 56 and 226 frames at 256x256: 44 MiB and 177 MiB of float32 frames
    ours_short = _child_growth(comfyui_root, tmp_path, "ours", short_t)
    ours_long = _child_growth(comfyui_root, tmp_path, "ours", long_t)
    stock_long = _child_growth(comfyui_root, tmp_path, "stock", long_t)
    mib = 2 ** 20
    print(f"peak RSS growth: Decode & Save {ours_short / mib:.0f} MiB (56 frames) -> {ours_long / mib:.0f} MiB "
          f"(226 frames) = x{ours_long / ours_short:.2f}; stock VAEDecode+CreateVideo+save_to at 226 frames "
          f"{stock_long / mib:.0f} MiB")
    assert ours_long < 1.2 * ours_short
    whole_video = 226 * 256 * 256 * 3 * 4
    assert stock_long - ours_long > 0.8 * whole_video, "stock should hold the whole video beyond what ours holds"


def test_the_vaes_get_every_weight_when_dynamic_vram_builds_them_weightless(comfy_inprocess, monkeypatch, caplog):
    """Under Dynamic VRAM (comfy-aimdo on), ComfyUI builds its no-init Linear without weight or bias, to take them
    from the state dict. The bench's drawn VAEs must still fill every one: the full-size decode on the GPU failed
    with "'NoneType' object has no attribute 'device'" in the decoder's first Linear. Built with aimdo on, the
    VAEs decode exactly as the same seeds built with it off, and ComfyUI's VAE class, shown the full-size keys it
    recognises the model by, reports none missing (on the H100 it listed every Linear's as missing, a false alarm
    in the log of each VAE-file write)."""
    import comfy.memory_management
    import comfy.sd
    from comfy.ldm.minimax import audio_vae, vae

    from longmedia.testing.tiny_vae import tiny_audio_vae, tiny_video_vae

    reference = tiny_video_vae(comfy.sd, vae, seed=7), tiny_audio_vae(comfy.sd, audio_vae, seed=8)
    monkeypatch.setattr(comfy.memory_management, "aimdo_enabled", True)
    caplog.clear()
    built = tiny_video_vae(comfy.sd, vae, seed=7), tiny_audio_vae(comfy.sd, audio_vae, seed=8)
    assert not [r.getMessage()[:120] for r in caplog.records if "Missing VAE keys" in r.getMessage()]
    monkeypatch.setattr(comfy.memory_management, "aimdo_enabled", False)    # decode on the CPU path, as reference
    for ref, got in zip(reference, built):
        linears = [(n, m) for n, m in got.first_stage_model.named_modules() if isinstance(m, torch.nn.Linear)]
        assert linears and all(m.weight is not None for _, m in linears), [n for n, m in linears if m.weight is None]
        ref_params = dict(ref.first_stage_model.named_parameters())
        got_params = dict(got.first_stage_model.named_parameters())
        assert ref_params.keys() == got_params.keys()
        assert all(torch.equal(ref_params[k], got_params[k]) for k in ref_params)
    latent = av_latent(seed=11, t=5, h=2, w=3, audio_t=20)
    with torch.inference_mode():
        assert torch.equal(stock_images(built[0], latent), stock_images(reference[0], latent))


def test_each_chunk_frees_pins_first_when_ram_is_short_and_the_file_is_unchanged(vaes, tmp_path):
    """A machine whose pins left 1 GiB free: before each decoded chunk takes host RAM, ComfyUI's pins are freed (its
    pin API, stood in here) until two chunks and ComfyUI's 2 GiB floor fit; the file equals the plain run's."""
    from longmedia.comfy.decode_save import decode_and_save
    from longmedia.planning.host_ram import PIN_BUDGET_FLOOR_BYTES
    from longmedia.report.memory import RamFacts

    gib = 2 ** 30
    state = {"available": gib, "pinned": 20 * gib}
    asked: list[int] = []

    def free_pins(wanted: int) -> int:
        asked.append(wanted)
        state["pinned"] -= wanted
        state["available"] += wanted
        return wanted

    def consume() -> int:  # every chunk's frames are used once written: RAM is short again at the next
        state["available"] = gib
        return gib

    facts = RamFacts(available=lambda: state["available"], pinned=lambda: state["pinned"],
                     free_pins=free_pins, read_bytes=lambda: None)
    video_vae, audio_vae = vaes
    latent = av_latent(seed=21)
    plain = decode_and_save(latent, video_vae, audio_vae, filename_prefix="video/plain", output_dir=str(tmp_path),
                            encode_ahead=False)
    short = decode_and_save(latent, video_vae, audio_vae, filename_prefix="video/short", output_dir=str(tmp_path),
                            encode_ahead=False, ram_facts=facts, on_chunk=lambda c: consume())
    chunks = short.report.chunks
    assert chunks >= 3 and len(asked) == chunks, asked
    largest = short.report.largest_chunk_bytes
    assert max(asked) == 2 * largest + PIN_BUDGET_FLOOR_BYTES - gib
    assert any("ComfyUI's pins freed before them" in n for n in short.report.notes)
    assert not any("pins freed" in n for n in plain.report.notes)
    assert _read(Path(short.path))["video"] == _read(Path(plain.path))["video"]
