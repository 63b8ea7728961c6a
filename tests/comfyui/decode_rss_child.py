"""Child process of test_decode_save's RAM test: one decode-and-save of a random AV latent, its peak RSS growth.

argv: COMFYUI_ROOT OUT_DIR MODE(ours|stock) LATENT_T. Builds the tiny H3 video VAE (ComfyUI's class), a random
[1, 24, T, SIDE, SIDE] latent (SIDE 16: 256x256 px) and a random stereo waveform of the video's length (what stock
VAEDecodeAudio hands on: the audio is decoded whole before the video, and on the CPU its decoder's working
memory would be counted as if it were host RAM), resets the kernel's peak-RSS mark (VmHWM via
/proc/self/clear_refs), runs Decode & Save's video decode and mux (ours) or stock VAEDecode ->
VideoFromComponents.save_to (stock, CreateVideo + SaveVideo's writer), and prints `GROWTH <bytes>`: peak RSS
during the run minus RSS before it. On the CPU the decoder's own per-chunk working memory (the device's, on
a GPU) is counted too: it is the same for every length.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

SIDE = 16          # latent cells: 256x256 px


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def main() -> None:
    root, out_dir, mode, latent_t = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    del root  # on PYTHONPATH already (bench.cards.comfy_process.child_env, the one place that puts it there)
    import torch
    from comfy.cli_args import args

    args.cpu = True
    import comfy.nested_tensor
    import comfy.sd
    from comfy.ldm.minimax import vae

    from longmedia.testing.tiny_vae import tiny_video_vae

    with torch.inference_mode():
        video_vae = tiny_video_vae(comfy.sd, vae, seed=1)
        g = torch.Generator().manual_seed(latent_t)
        frames = (latent_t - 2) // 5 * 17 + 5
        video = torch.randn(1, 24, latent_t, SIDE, SIDE, generator=g)
        # the audio as stock VAEDecodeAudio hands it on (decoded whole before the video; its bytes are the report's)
        audio = {"waveform": torch.randn(1, 2, frames * 32000 // 24, generator=g) * 0.1, "sample_rate": 32000}
        Path("/proc/self/clear_refs").write_text("5")        # VmHWM := current RSS
        before = _status("VmRSS")
        if mode == "ours":
            from longmedia.comfy.decode_save import save_streamed

            result = save_streamed(video, video_vae, audio, fps=24.0, filename_prefix=f"rss/ours_{latent_t}",
                                   bit_depth=8, crf=-1.0, metadata=None, output_dir=str(out_dir))
            assert result.report.frames == frames, result.report
            print(f"CHUNK {result.report.largest_chunk_bytes}")
        else:
            import comfy.nested_tensor
            from comfy_api.latest import InputImpl, Types

            import nodes

            latent = {"samples": comfy.nested_tensor.NestedTensor((video, torch.zeros(1, 32, 2, 1)))}
            images = nodes.VAEDecode().decode(video_vae, latent)[0]
            components = Types.VideoComponents(images=images, audio=audio, frame_rate=Fraction(24))
            InputImpl.VideoFromComponents(components).save_to(str(out_dir / f"stock_{latent_t}.mp4"))
        peak = _status("VmHWM")
    print(f"GROWTH {peak - before}")


if __name__ == "__main__":
    main()
