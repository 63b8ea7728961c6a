"""The long-job bench's VAE files: the decode stage loads the full-size VAEs through ComfyUI's own VAELoader, as a
user's graph does (building them in the decode process left a second copy of the weights in RAM on the GPU)."""

from __future__ import annotations

import torch

from bench.long_job import vae_files


def test_a_written_vae_file_loads_through_comfyui_s_vae_loader_bit_for_bit(comfy_inprocess, tmp_path, monkeypatch):
    """The full-size H3 audio VAE (random weights), written as the bench writes it, comes back from VAELoader as
    ComfyUI's own MiniMaxH3AudioVAE with every tensor equal. (The video VAE takes the same path; at full size it is
    9.7 GiB in float32 on a CPU, too large for this box.)"""
    import comfy.sd
    import folder_paths
    from comfy.ldm.minimax import audio_vae

    import nodes
    from longmedia.testing.tiny_vae import full_audio_vae

    built = full_audio_vae(comfy.sd, audio_vae, seed=4)
    path = vae_files.save(built, tmp_path / vae_files.AUDIO_VAE_FILE)
    assert path.is_file() and not path.with_suffix(".partial").exists()
    _, exts = folder_paths.folder_names_and_paths["vae"]
    monkeypatch.setitem(folder_paths.folder_names_and_paths, "vae", ([str(tmp_path)], exts))
    monkeypatch.setattr(folder_paths, "filename_list_cache", {})
    (loaded,) = nodes.VAELoader().load_vae(vae_files.AUDIO_VAE_FILE)
    assert type(loaded.first_stage_model) is audio_vae.MiniMaxH3AudioVAE
    want, got = built.first_stage_model.state_dict(), loaded.first_stage_model.state_dict()
    assert want.keys() == got.keys() and len(want) > 100
    different = [k for k in want if not torch.equal(want[k], got[k].to(want[k].dtype))]
    assert not different, different[:5]
    assert torch.equal(want["pre_block.attn.zero_k_bias"], got["pre_block.attn.zero_k_bias"])


def test_the_full_size_decode_prompt_loads_both_vaes_with_comfyui_s_loader(tmp_path):
    from bench.long_job.entry import parse
    from bench.long_job.job import FULL
    from bench.long_job.stage import stage_prompt

    a = parse(["--out", str(tmp_path)])
    a.child = "decode"
    prompt = stage_prompt(a, FULL, "")
    loaders = {n["inputs"]["vae_name"] for n in prompt.values() if n["class_type"] == "VAELoader"}
    assert loaders == {vae_files.VIDEO_VAE_FILE, vae_files.AUDIO_VAE_FILE}
    assert prompt["run"]["inputs"]["video_vae"] == ["vv", 0] and prompt["run"]["inputs"]["audio_vae"] == ["av", 0]
    a.smoke = True
    assert [n["class_type"] for n in stage_prompt(a, FULL, "").values()] == ["LongMediaLongJobDecode"]
