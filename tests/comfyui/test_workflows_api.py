"""API prompts in a real ComfyUI server on the tiny models: the examples (workflows/*.api.json) and our stage nodes.

`tiny_rewrite` is the one documented change between an example and what runs here. The schema snapshot
the offline validator uses (tests/data/longmedia_object_info.json) is checked against the live server;
regenerate it with LONGMEDIA_UPDATE_SNAPSHOT=1 when a node's schema changes on purpose.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
from pathlib import Path

import harness
import pytest
import torch
from api_examples import DECODE_SAVE, TINY_STEPS, TINY_VAE, load_example, node_id, tiny_rewrite
from safetensors.torch import load_file
from test_stage_nodes import FRAMES, SECONDS, H, TinyVideoVAE, W

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests" / "data" / "longmedia_object_info.json"
PACK_MODULE = f"custom_nodes.{harness.PACK_LINK_NAME}"
def tiny_vae_node_source() -> str:
    """A one-file custom node serving `TinyVideoVAE` (the class the in-process tests use) as a VAE."""
    return "\n".join([
        '"""Test-only VAE stand-in, written by tests/comfyui/test_workflows_api.py."""',
        "import math", "import torch", "", inspect.getsource(TinyVideoVAE), "",
        f"class {TINY_VAE}:",
        "    CATEGORY = 'longmedia/testing'", "    RETURN_TYPES = ('VAE',)", "    FUNCTION = 'build'", "",
        "    @classmethod", "    def INPUT_TYPES(cls):",
        "        return {'required': {'seed': ('INT', {'default': 0, 'min': 0, 'max': 2 ** 31 - 1})}}", "",
        "    def build(self, seed):", "        return (TinyVideoVAE(seed),)", "",
        f"NODE_CLASS_MAPPINGS = {{'{TINY_VAE}': {TINY_VAE}}}", ""])


@pytest.fixture(scope="module")
def vae_server(comfyui_root, tmp_path_factory):
    """A second server whose custom_nodes also hold the tiny VAE node (custom nodes load only at startup)."""
    base = harness.prepare_base_directory(tmp_path_factory.mktemp("comfy_vae_base"), variants=("fp32",))
    (base / "custom_nodes" / "longmedia_stage_test_vae.py").write_text(tiny_vae_node_source())
    server = harness.start_server(comfyui_root, base)
    try:
        yield server
    finally:
        server.stop()


def write_pictures(server, count: int = 2) -> dict[str, str]:
    from PIL import Image

    names = {}
    for i, old in enumerate(("longmedia_ref_person.png", "longmedia_ref_market.png")[:count]):
        pixels = (torch.rand(80, 96, 3, generator=torch.Generator().manual_seed(i)) * 255).to(torch.uint8)
        new = f"tiny_ref_{i}.png"
        Image.fromarray(pixels.numpy()).save(server.base / "input" / new)
        names[old] = new
    return names


def live_schemas(server) -> dict:
    return {k: {kk: vv for kk, vv in v.items() if kk != "python_module"}
            for k, v in server.object_info().items() if v.get("python_module") == PACK_MODULE}


def test_object_info_snapshot_matches_the_live_server(comfy_server):
    live = live_schemas(comfy_server)
    assert {"LongMediaSetup", "LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner"} <= set(live)
    if os.environ.get("LONGMEDIA_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(live, indent=1, sort_keys=True) + "\n")
    stored = json.loads(SNAPSHOT.read_text())
    drifted = sorted(k for k in set(live) | set(stored) if live.get(k) != stored.get(k))
    assert not drifted, (f"{SNAPSHOT.name} differs from the live /object_info for {drifted}: rerun this test with "
                         "LONGMEDIA_UPDATE_SNAPSHOT=1 and check workflows/ still validate (tests/core)")


def saved(server, name: str) -> dict[str, torch.Tensor]:
    out = load_file(str(server.output_path(name)))
    for stream in ("video", "audio"):
        assert torch.isfinite(out[stream]).all() and out[stream].std() > 0.05, stream
    return out


def test_t2va_10s_runs(comfy_server):
    prompt = tiny_rewrite(load_example("t2va_10s"), "wf_t2va_10s.safetensors")
    entry = comfy_server.run(prompt, timeout=240)
    out = saved(comfy_server, "wf_t2va_10s.safetensors")
    assert out["video"].shape == (1, 24, 7, 4, 4) and out["audio"].shape == (1, 32, 2, 37)
    setup = entry["outputs"][node_id(prompt, "LongMediaSetup")]
    assert "0.9 s -> 22 frames" in setup["text"][0]
    assert entry["outputs"][node_id(prompt, "LongMediaSampler")]["longmedia_report"][0]["plan"]


def test_ref2va_hires_refiner_runs_and_keeps_the_first_pass_audio(vae_server):
    prompt = tiny_rewrite(load_example("ref2va_hires_refiner"), "wf_ref2va_final.safetensors",
                          write_pictures(vae_server))
    sampler = node_id(prompt, "LongMediaSampler")
    prompt["save_first"] = {"class_type": "LongMediaTestSaveLatent",
                            "inputs": {"samples": [sampler, 0], "filename": "wf_ref2va_first.safetensors"}}
    entry = vae_server.run(prompt, timeout=300)
    first, final = saved(vae_server, "wf_ref2va_first.safetensors"), saved(vae_server, "wf_ref2va_final.safetensors")
    assert first["video"].shape == (1, 24, 7, 4, 4) and final["video"].shape == (1, 24, 7, 6, 6)   # x1.4 -> 96 px
    assert torch.equal(final["audio"], first["audio"])
    outputs = entry["outputs"]
    job = outputs[node_id(prompt, "LongMediaSetup")]["longmedia_job"][0]
    assert job["family"] == "ref2va" and len(job["geometry"]["references"]) == 2
    hires = outputs[node_id(prompt, "LongMediaHiRes")]["longmedia_report"][0]
    assert hires["plan"]["geometry"]["video_rows"] == 7 * 9 and any("Hi-Res" in n for n in hires["notes"])
    # the same prompt saved with the flat names of an older Setup (ref_image_1, not family.pictures.ref_image_1)
    # still runs where `family` is a DynamicCombo, to the same latent bit for bit
    flat = copy.deepcopy(prompt)
    setup = flat[node_id(flat, "LongMediaSetup")]["inputs"]
    assert {"family.pictures.ref_image_1", "family.pictures.ref_image_2"} <= set(setup)
    flat[node_id(flat, "LongMediaSetup")]["inputs"] = {k.rsplit(".", 1)[-1]: v for k, v in setup.items()}
    del flat["save_first"]
    flat["save"]["inputs"]["filename"] = "wf_ref2va_flat.safetensors"
    vae_server.run(flat, timeout=300)
    again = saved(vae_server, "wf_ref2va_flat.safetensors")
    assert torch.equal(again["video"], final["video"]) and torch.equal(again["audio"], final["audio"])


@pytest.mark.parametrize("example", ["t2va_30s_segmented", "t2va_60s_long"])
def test_long_examples_run_every_stage_segment_by_segment(comfy_server, example):
    """Setup -> Sampler -> Hi-Res -> Refiner -> Decode & Save, every stage on the job. At 64 px Hi-Res's 1.25 snaps
    back to 64 px (the /32 grid), so the test runs it at 1.5 (64 -> 96 px): the one change beyond `tiny_rewrite`."""
    prompt = tiny_rewrite(load_example(example), f"wf_{example}.safetensors")
    prompt[node_id(prompt, "LongMediaHiRes")]["inputs"]["scale"] = 1.5
    prompt["save_first"] = {"class_type": "LongMediaTestSaveLatent", "inputs": {
        "samples": [node_id(prompt, "LongMediaSampler"), 0], "filename": f"wf_{example}_first.safetensors"}}
    entry = comfy_server.run(prompt, timeout=300)
    job = entry["outputs"][node_id(prompt, "LongMediaSetup")]["longmedia_job"][0]
    assert job["segments"]["count"] == 2 and job["geometry"]["frames"] == 39
    first = saved(comfy_server, f"wf_{example}_first.safetensors")
    out = saved(comfy_server, f"wf_{example}.safetensors")
    assert first["video"].shape == (1, 24, 17, 4, 4) and first["audio"].shape == (1, 32, 2, 93)   # the whole 56 frames
    assert out["video"].shape == (1, 24, 17, 6, 6) and torch.equal(out["audio"], first["audio"])   # audio kept
    for stage in ("LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner"):
        report = entry["outputs"][node_id(prompt, stage)]["longmedia_report"][0]
        assert len(report["segments"]) == 2, f"{stage} should run one pass per segment of the job"
    hires = entry["outputs"][node_id(prompt, "LongMediaHiRes")]["longmedia_report"][0]
    sampler = entry["outputs"][node_id(prompt, "LongMediaSampler")]["longmedia_report"][0]
    for ours, low in zip(hires["segments"], sampler["segments"]):   # rows x scale^2 (2x2 patches: 4 -> 9 per frame)
        assert ours["run"]["plan"]["geometry"]["video_rows"] * 4 == low["run"]["plan"]["geometry"]["video_rows"] * 9
    # LongMedia Decode & Save ran on ComfyUI's H3 VAE classes (tiny): one mp4 of the whole job, shown as SaveVideo shows it
    shown = entry["outputs"][node_id(prompt, DECODE_SAVE)]
    (item,) = shown["images"]
    assert item["type"] == "output" and item["filename"].endswith("_00001_.mp4") and shown["animated"] == [True]
    assert example in item["filename"]
    decode = shown["longmedia_decode"][0]
    assert decode["decode_path"] == "chunked" and decode["frames"] == 56 and decode["largest_chunk_frames"] == 17
    import av

    with av.open(str(comfy_server.output_path(f"{item['subfolder']}/{item['filename']}"))) as c:
        assert [s.type for s in c.streams] == ["video", "audio"]
        assert c.streams.video[0].frames == 56 and (c.streams.video[0].width, c.streams.video[0].height) == (96, 96)


TURBO_LORA = "minimax_h3_turbo_lora.safetensors"   # the name the turbo examples give the downloaded LoRA


def write_tiny_lora(server, rank: int = 4, seed: int = 0) -> Path:
    """A random rank-`rank` LoRA on every linear of the tiny H3's DiT blocks, in ComfyUI's generic key format
    (`diffusion_model.<module>.lora_up.weight` / `.lora_down.weight`), written as the turbo examples name it."""
    from safetensors.torch import save_file

    from longmedia.testing.tiny_h3 import TINY_DIMS, tiny_h3_state_dict

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for key, w in tiny_h3_state_dict(TINY_DIMS, variant="fp32", seed=0).items():
        if key.startswith("blocks.") and key.endswith(".weight") and w.ndim == 2:
            stem = "diffusion_model." + key.removesuffix(".weight")
            tensors[f"{stem}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.05
            tensors[f"{stem}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * 0.05
    path = server.base / "models" / "loras" / TURBO_LORA
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
    return path


def test_t2va_60s_long_turbo_runs_8_steps_at_cfg_1_with_its_lora(comfy_server):
    """The turbo example as saved (a LoRA on the model, 8 steps, cfg 1), segment by segment through Hi-Res and the
    Refiner: each pass makes one model call per step (ComfyUI skips the negative's at cfg 1), the Hi-Res pass runs
    half the 8 steps (denoise 0.5), and the LoRA changes the result (the same prompt without it differs)."""
    write_tiny_lora(comfy_server)
    prompt = tiny_rewrite(load_example("t2va_60s_long_turbo"), "wf_turbo.safetensors")
    prompt[node_id(prompt, "BasicScheduler")]["inputs"]["steps"] = 8     # tiny_rewrite's 3 steps: keep the 8
    prompt[node_id(prompt, "LongMediaHiRes")]["inputs"]["scale"] = 1.5   # 1.25 snaps back to 64 px at this size
    entry = comfy_server.run(prompt, timeout=420)
    out = saved(comfy_server, "wf_turbo.safetensors")
    assert out["video"].shape == (1, 24, 17, 6, 6)
    expected = {"LongMediaSampler": 8, "LongMediaHiRes": 4, "LongMediaRefiner": 2}
    for stage, steps in expected.items():
        report = entry["outputs"][node_id(prompt, stage)]["longmedia_report"][0]
        assert len(report["segments"]) == 2
        for seg in report["segments"]:
            run = seg["run"]
            assert run["cfg"] == 1.0 and run["sampler_steps"] == steps and run["model_calls"] == steps, stage
    bare = copy.deepcopy(prompt)
    lora = node_id(bare, "LoraLoaderModelOnly")
    unet = bare[lora]["inputs"]["model"]
    for node in bare.values():
        for name, value in node["inputs"].items():
            if value == [lora, 0]:
                node["inputs"][name] = unet
    del bare[lora]
    bare["save"]["inputs"]["filename"] = "wf_turbo_bare.safetensors"
    comfy_server.run(bare, timeout=420)
    assert not torch.equal(saved(comfy_server, "wf_turbo_bare.safetensors")["video"], out["video"])


def test_t2va_story_retake_reuses_the_segments_before_the_retake(comfy_server):
    """The three-prompt story: queued with every seed auto, then as saved (segment 2 retaken with seed 7): the
    Retakes node's cache (kept by ComfyUI's output cache between the queues) serves segments 0 and 1, and the
    video equals a run of the same seeds without the cache bit for bit."""
    retake = tiny_rewrite(load_example("t2va_story_retake"), "wf_story_retake.safetensors")
    sampler, setup = node_id(retake, "LongMediaSampler"), node_id(retake, "LongMediaSetup")
    assert retake[sampler]["inputs"]["segment_seeds"] == "auto, auto, 7"
    first = copy.deepcopy(retake)
    first[sampler]["inputs"]["segment_seeds"] = ""
    first["save"]["inputs"]["filename"] = "wf_story_first.safetensors"
    entry = comfy_server.run(first, timeout=400)
    job = entry["outputs"][setup]["longmedia_job"][0]
    assert job["segments"]["count"] == 3 and len(set(job["prompts"]["texts"])) == 3
    assert "| start | duration | prompt" in entry["outputs"][setup]["text"][0]
    report = entry["outputs"][sampler]["longmedia_report"][0]
    assert [s["source"] for s in report["segments"]] == ["sampled"] * 3
    entry = comfy_server.run(retake, timeout=400)
    report = entry["outputs"][sampler]["longmedia_report"][0]
    assert [s["source"] for s in report["segments"]] == ["reused", "reused", "sampled"]
    assert report["segments"][2]["seed"] == 7 and report["retakes"]["reused"] == [0, 1]
    assert report["segments"][0]["sample_seconds"] == 0.0 < report["segments"][2]["sample_seconds"]
    fresh = copy.deepcopy(retake)
    del fresh[sampler]["inputs"]["retakes"], fresh[node_id(fresh, "LongMediaRetakes")]
    fresh["save"]["inputs"]["filename"] = "wf_story_fresh.safetensors"
    comfy_server.run(fresh, timeout=400)
    a, b, c = (saved(comfy_server, f"wf_story_{n}.safetensors") for n in ("retake", "fresh", "first"))
    assert all(torch.equal(a[k], b[k]) for k in ("video", "audio"))
    assert torch.equal(a["video"][:, :, :22], c["video"][:, :, :22]) and not torch.equal(a["video"], c["video"])


def test_a_retake_survives_an_unrelated_prompt_and_comfyui_s_free_memory_request_clears_it(comfy_server):
    """Issue 49: any other prompt queued between two retakes made ComfyUI 0.33's output cache drop the Retakes node's
    output and the reloaded model was another object, so every segment was sampled again. Now the segments are in
    ComfyUI's temp folder under keys that know the model by its file: the story queued, an unrelated prompt (another
    model), then the retake of segment 2 reuses segments 0 and 1 and equals a run without the cache bit for bit;
    ComfyUI's "free model and node cache" request (POST /free) empties the store, and the next retake samples
    everything."""
    retake = tiny_rewrite(load_example("t2va_story_retake"), "wf_survive_retake.safetensors")
    sampler, retakes = node_id(retake, "LongMediaSampler"), node_id(retake, "LongMediaRetakes")
    retake[node_id(retake, "RandomNoise")]["inputs"]["noise_seed"] = 4242     # a job no other test queued
    first = copy.deepcopy(retake)
    first[sampler]["inputs"]["segment_seeds"] = ""
    first["save"]["inputs"]["filename"] = "wf_survive_first.safetensors"
    report = comfy_server.run(first, timeout=400)["outputs"][sampler]["longmedia_report"][0]
    assert [s["source"] for s in report["segments"]] == ["sampled"] * 3
    comfy_server.run(harness.t2va_prompt("tiny_h3_bf16.safetensors", "wf_survive_unrelated.safetensors"),
                     timeout=300)
    report = comfy_server.run(retake, timeout=400)["outputs"][sampler]["longmedia_report"][0]
    assert [s["source"] for s in report["segments"]] == ["reused", "reused", "sampled"], report["retakes"]
    assert report["retakes"]["in_memory_only"] is None and report["retakes"]["notes"] == []
    fresh = copy.deepcopy(retake)
    del fresh[sampler]["inputs"]["retakes"], fresh[retakes]
    fresh["save"]["inputs"]["filename"] = "wf_survive_fresh.safetensors"
    comfy_server.run(fresh, timeout=400)
    a, b = (saved(comfy_server, f"wf_survive_{n}.safetensors") for n in ("retake", "fresh"))
    assert all(torch.equal(a[k], b[k]) for k in ("video", "audio"))
    store = comfy_server.base / "temp" / "longmedia_retakes"
    assert len(list(store.rglob("*.pt"))) >= 4
    comfy_server.request("POST", "/api/free", {"unload_models": True, "free_memory": True})   # as the frontend asks
    assert not store.exists()
    retake[retakes]["inputs"]["ram_mb"] = 1024      # a new cache whatever the worker has reset by now
    report = comfy_server.run(retake, timeout=400)["outputs"][sampler]["longmedia_report"][0]
    assert [s["source"] for s in report["segments"]] == ["sampled"] * 3


def test_segmented_progress_rises_monotonically_through_the_api(comfy_server):
    """A 3-pass job: the Sampler's websocket `progress` events form one bar over passes x steps, never going back."""
    prompt = tiny_rewrite(load_example("t2va_30s_segmented"), "wf_progress.safetensors")
    prompt[node_id(prompt, "LongMediaSetup")]["inputs"].update(seconds=3.5, segment_seconds=1.0)
    entry, messages = comfy_server.run_watching(prompt, timeout=300)
    sampler = node_id(prompt, "LongMediaSampler")
    job = entry["outputs"][node_id(prompt, "LongMediaSetup")]["longmedia_job"][0]
    passes, steps = job["segments"]["count"], TINY_STEPS["BasicScheduler"]
    assert passes == 3, job["segments"]
    events = [(m["data"]["value"], m["data"]["max"]) for m in messages
              if m.get("type") == "progress" and m["data"].get("node") == sampler]
    assert events, [m.get("type") for m in messages]
    assert {total for _, total in events} == {passes * steps}, events
    values = [value for value, _ in events]
    assert values == sorted(values) and values[-1] == passes * steps, events


def test_every_node_has_help_the_info_tab_finds(comfy_server):
    """The frontend's Info tab fetches /extensions/<pack>/docs/<node id>/<locale>.md, then docs/<node id>.md: the
    one page per node is the second, served for every locale (issue 47: each page was there twice)."""
    import urllib.error
    import urllib.request

    ours = [k for k, v in comfy_server.object_info().items() if v.get("python_module") == PACK_MODULE]
    assert sorted(ours) == ["LongMediaDecodeSave", "LongMediaHiRes", "LongMediaRefiner", "LongMediaRetakes", "LongMediaSampler",
                           "LongMediaSetup"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for node in ours:
        title = comfy_server.object_info()[node]["display_name"]
        base = f"{comfy_server.url}/extensions/{harness.PACK_LINK_NAME}/docs/{node}"
        with opener.open(f"{base}.md", timeout=10) as reply:
            text = reply.read().decode("utf-8")
        assert reply.status == 200 and text.startswith(f"# {title}\n"), (node, text[:80])
        with pytest.raises(urllib.error.HTTPError) as missing:
            opener.open(f"{base}/en.md", timeout=10)
        assert missing.value.code == 404, node


# --- our stage nodes through /prompt ----------------------------------------------------------------------------

STAGES = ("LongMediaSetup", "LongMediaHiRes", "LongMediaRefiner", "LongMediaDecodeSave")


def test_stage_nodes_register_with_tooltips(comfy_server):
    assert comfy_server.custom_node_import_error() is None
    info = comfy_server.object_info()
    for name in STAGES:
        spec = info[name]
        inputs = {**spec["input"]["required"], **spec["input"].get("optional", {})}
        for key, value in inputs.items():
            assert len(value) > 1 and value[1].get("tooltip"), f"{name}.{key} has no tooltip"
    assert info["LongMediaSetup"]["output"] == ["CONDITIONING", "CONDITIONING", "LATENT", "LONGMEDIA_JOB"]
    assert info["LongMediaHiRes"]["output_name"] == ["output", "denoised_output", "report"]
    # family is a DynamicCombo (both test hosts have V3 dynamic inputs): fl2va holds the frames, ref2va one
    # Autogrow group per reference kind; nothing else lists a frame or reference socket
    family = info["LongMediaSetup"]["input"]["required"]["family"]
    assert family[0] == "COMFY_DYNAMICCOMBO_V3" and family[1].get("tooltip")
    options = {o["key"]: o["inputs"] for o in family[1]["options"]}
    assert list(options) == ["t2va", "fl2va", "ref2va"] and not any(options["t2va"].values())
    assert list(options["fl2va"]["optional"]) == ["first_frame", "last_frame"]
    groups = {k: v[1]["template"]["names"] for k, v in options["ref2va"]["optional"].items()}
    assert groups == {"pictures": [f"ref_image_{i}" for i in range(1, 10)],
                      "videos": ["ref_video_1", "ref_video_2", "ref_video_3"],
                      "video_audios": ["ref_video_audio_1", "ref_video_audio_2", "ref_video_audio_3"],
                      "audios": ["ref_audio_1", "ref_audio_2", "ref_audio_3"]}
    assert not [k for k in info["LongMediaSetup"]["input"]["optional"] if k[-1].isdigit() or k.endswith("_frame")]


def stage_prompt(out_prefix: str, **setup_overrides) -> dict:
    prompt = harness.t2va_prompt("tiny_h3_fp32.safetensors", f"{out_prefix}_first.safetensors", width=W, height=H,
                         length=FRAMES, steps=3)
    del prompt["latent"]
    prompt["setup"] = {"class_type": "LongMediaSetup",
                       "inputs": {"positive": ["pos", 0], "negative": ["neg", 0], "width": W, "height": H,
                                  "seconds": SECONDS, "family": "t2va", "reference_budget": "low",
                                  "segment_seconds": 0.0, "context_frames": 22, **setup_overrides}}
    prompt["guider"]["inputs"].update(positive=["setup", 0], negative=["setup", 1])
    prompt["sample"] = {"class_type": "LongMediaSampler",
                        "inputs": {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0],
                                   "sigmas": ["sigmas", 0], "latent": ["setup", 2], "job": ["setup", 3],
                                   "memory_mode": "auto", "attention_mode": "auto"}}
    controls = {"memory_mode": "low_vram", "attention_mode": "existing", "mlp_chunk_tokens": 64}
    prompt["hires"] = {"class_type": "LongMediaHiRes",
                       "inputs": {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0],
                                  "sigmas": ["sigmas", 0], "latent": ["sample", 0], "scale": 1.5, "denoise": 0.67,
                                  "method": "bicubic", "keep_audio": True, **controls}}
    prompt["refine"] = {"class_type": "LongMediaRefiner",
                        "inputs": {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0],
                                   "latent": ["hires", 0], "scheduler": "simple", "steps": 2, "denoise": 0.25,
                                   "memory_mode": "auto", "attention_mode": "auto"}}
    prompt["save_hires"] = {"class_type": "LongMediaTestSaveLatent",
                            "inputs": {"samples": ["hires", 0], "filename": f"{out_prefix}_hires.safetensors"}}
    prompt["save_final"] = {"class_type": "LongMediaTestSaveLatent",
                            "inputs": {"samples": ["refine", 0], "filename": f"{out_prefix}_final.safetensors"}}
    return prompt


def test_setup_sampler_hires_refiner_prompt_keeps_audio_bit_for_bit(comfy_server):
    entry = comfy_server.run(stage_prompt("stages"), timeout=240)
    first, hires, final = (load_file(str(comfy_server.output_path(f"stages_{n}.safetensors")))
                           for n in ("first", "hires", "final"))
    assert hires["video"].shape == (1, 24, 7, 6, 6) == final["video"].shape
    assert torch.equal(hires["audio"], first["audio"]) and torch.equal(final["audio"], first["audio"])
    assert not torch.equal(final["video"], hires["video"]) and torch.isfinite(final["video"]).all()
    outputs = entry["outputs"]
    assert "22 frames" in outputs["setup"]["text"][0] and outputs["setup"]["longmedia_job"][0]["family"] == "t2va"
    hires_report = outputs["hires"]["longmedia_report"][0]
    assert hires_report["plan"]["memory_mode"] == "low_vram"
    assert hires_report["plan"]["geometry"]["video_rows"] == 7 * 9
    assert any("audio kept" in n for n in outputs["refine"]["longmedia_report"][0]["notes"])


def test_setup_width_off_the_grid_fails_naming_the_input(comfy_server):
    with pytest.raises(harness.ComfyHarnessError, match="width=80 is not allowed"):
        comfy_server.run(stage_prompt("badwidth", width=80), timeout=120)
