"""The full-size H3 video and audio VAEs as files (random weights), so that the decode stage loads them through
ComfyUI's own VAELoader, as a user's graph does.

Built in the decode process from drawn weights, the VAEs measured 12.3 GiB of anonymous RSS on the H100 against the
plan's 8.9 GiB (docs/lab/2026-12-05-long-job-gpu-plan.md). By ComfyUI's code, Dynamic VRAM copies a layer's weights
into pinned host memory (`comfy.pinned_memory`) unless they were loaded into it from a file, so the drawn weights
were a second copy that no user's process holds. Loaded from these files, the same decode peaked at 7.54 GiB of RSS
against the plan's 8.91 (docs/lab/data/2026-12-06-h100-decode-vaefiles.jsonl). The files are written once, in a
process of their own, beside the DiT checkpoint (--models)."""

from __future__ import annotations

from pathlib import Path

VIDEO_VAE_FILE = "longmedia_bench_h3_video_vae.safetensors"
AUDIO_VAE_FILE = "longmedia_bench_h3_audio_vae.safetensors"
VAE_SEED = 3


def missing(models: Path) -> bool:
    return not all((models / name).is_file() for name in (VIDEO_VAE_FILE, AUDIO_VAE_FILE))


def write(models: Path, seed: int = VAE_SEED) -> list[Path]:
    """ComfyUI's `MiniMaxH3VideoVAE` and `MiniMaxH3AudioVAE` at full size with seeded random weights (drawn on the
    GPU when there is one), each written in the dtype ComfyUI runs it in; ComfyUI must be importable (this process
    started through `bench.cards.comfy_process`)."""
    import comfy.sd
    import torch
    from comfy.ldm.minimax import audio_vae, vae

    from longmedia.testing import tiny_vae

    draw = "cuda" if torch.cuda.is_available() else "cpu"
    models.mkdir(parents=True, exist_ok=True)
    video = save(tiny_vae.full_video_vae(comfy.sd, vae, seed=seed, draw_device=draw), models / VIDEO_VAE_FILE)
    audio = save(tiny_vae.full_audio_vae(comfy.sd, audio_vae, seed=seed + 1, draw_device=draw), models / AUDIO_VAE_FILE)
    return [video, audio]


def save(vae, path: Path) -> Path:
    """`vae`'s model as the safetensors file ComfyUI's VAELoader reads (its own keys, in its running dtype)."""
    import comfy.utils

    tmp = path.with_suffix(".partial")
    comfy.utils.save_torch_file({k: v.contiguous() for k, v in vae.first_stage_model.state_dict().items()}, str(tmp))
    tmp.replace(path)            # a cut write never passes for a file
    return path


def main(a) -> int:
    """`python -P -m bench.long_job --child vaes --models DIR`: write both files."""
    from ..cards import comfy_process

    comfy_process.start_comfyui([])
    for path in write(a.models):
        print(f"vae file: {path} ({path.stat().st_size / 2 ** 30:.2f} GiB)", flush=True)
    return 0
