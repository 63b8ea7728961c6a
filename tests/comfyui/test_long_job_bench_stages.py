"""`python -m bench.long_job --smoke` with ComfyUI: every stage of the long-job bench in its own process on the CPU
(tiny checkpoint, 64x64, 2 s in 1 s segments; the Sampler split over two processes, continuing the saved latents),
through ComfyUI's PromptExecutor, with a row per pass and per stage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.cards.comfy_process import child_env
from bench.long_job.tables import ROWS_FILE, read_rows

REPO = Path(__file__).resolve().parents[2]


def test_the_smoke_runs_every_stage_and_writes_its_rows(comfyui_root, tmp_path):
    out = tmp_path / "long_job"
    env = child_env(REPO, {**os.environ, "LONGMEDIA_COMFYUI_ROOT": str(comfyui_root)})
    proc = subprocess.run([sys.executable, "-P", "-m", "bench.long_job", "--smoke", "--out", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = read_rows(out / ROWS_FILE)
    stages = [r for r in rows if r["kind"] == "stage"]
    assert [(r["stage"], r["passes"]) for r in stages] == [("sampler", [0, 1]), ("sampler", [1, 2]),
                                                           ("hires", [0, 0]), ("refiner", [0, 0]), ("decode", [0, 0])]
    assert all(r["result"] == "ok" and r["host_rss_peak_bytes"] > 0 for r in stages)
    for r in rows:      # RSS split into anonymous and file-backed pages (the mapped checkpoint), per pass and stage
        assert r["host_anon_peak_bytes"] > 0 and r["host_file_peak_bytes"] > 0, r
    passes = [(r["stage"], r["segment"]) for r in rows if r["kind"] == "pass"]
    assert passes == [("sampler", 0), ("sampler", 1), ("hires", 0), ("hires", 1), ("refiner", 0), ("refiner", 1),
                      ("decode", 0)]
    for r in rows:
        if r["kind"] == "pass" and r["stage"] != "decode":
            assert r["model_calls"] >= 1 and r["s_per_step"] > 0
    for seg in (s for r in stages for s in r.get("segments") or ()):   # the device as each pass's plan read it
        assert seg["usable_bytes"] > 0 and seg["device_at_plan"]["vram_total_bytes"] > 0, seg
        assert seg["predicted_peak_bytes"] <= seg["usable_bytes"]
    hires = next(r for r in stages if r["stage"] == "hires")
    assert [s["width"] for s in hires["segments"]] == [96, 96] and len(hires["seams"]["video"]) == 1
    decode = next(r for r in stages if r["stage"] == "decode")["decode"]
    assert decode["frames"] == 56 and (decode["width"], decode["height"]) == (96, 96)
    assert (out / decode["subfolder"] / decode["filename"]).is_file()
    assert "stage | seg | s/step (device)" in proc.stdout and "every stage ran on the CPU" in proc.stdout


def test_a_stage_with_seeded_input_starts_from_a_seeded_latent_and_says_so(comfyui_root, tmp_path):
    """--seeded-input: Hi-Res without the Sampler's latent in --out runs on a seeded random latent of the Sampler's
    output shape (the decode likewise, without the Refiner's; the Refiner, without Hi-Res's, of Hi-Res's output shape), and its rows carry seeded_input (without the flag the stage refuses: `nodes.load_latents`)."""
    import json

    import torch

    from bench.long_job.entry import parse, run_stage
    from longmedia.testing.tiny_h3 import write_tiny_h3

    def stage(name: str, out: Path) -> int:
        a = parse(["--smoke", "--out", str(out), "--seeded-input"])
        a.models = tmp_path / "models"
        a.models.mkdir(exist_ok=True)
        a.host_row = json.dumps({"host_ram_gib": None})
        a.stage, a.passes = name, None
        old = os.environ.get("LONGMEDIA_COMFYUI_ROOT")
        os.environ["LONGMEDIA_COMFYUI_ROOT"] = str(comfyui_root)
        try:
            return run_stage(a, write_tiny_h3(a.models, variant="fp32").name)
        finally:
            if old is None:
                os.environ.pop("LONGMEDIA_COMFYUI_ROOT")
            else:
                os.environ["LONGMEDIA_COMFYUI_ROOT"] = old

    out = tmp_path / "seeded"
    assert stage("hires", out) == 0
    rows = read_rows(out / ROWS_FILE)
    assert [r["kind"] for r in rows] == ["pass", "pass", "stage"] and all(r["seeded_input"] is True for r in rows)
    assert rows[-1]["result"] == "ok" and (out / "hires.pt").is_file() and not (out / "sampler.pt").exists()
    # the decode without the Refiner's latent: a seeded one of Hi-Res's output shape, the Refiner's
    assert stage("decode", out) == 0
    decode = read_rows(out / ROWS_FILE)[-1]
    assert decode["stage"] == "decode" and decode["result"] == "ok" and decode["seeded_input"] is True
    assert (decode["decode"]["width"], decode["decode"]["height"]) == (96, 96) and not (out / "refiner.pt").exists()
    # the Refiner without Hi-Res's latent: a seeded one of Hi-Res's output shape (its video at Hi-Res's size)
    alone = tmp_path / "refiner_alone"
    assert stage("refiner", alone) == 0 and not (alone / "hires.pt").exists()
    hires_out = torch.load(out / "hires.pt", weights_only=True)["output"]
    refiner_out = torch.load(alone / "refiner.pt", weights_only=True)["output"]
    assert [tuple(t.shape) for t in refiner_out] == [tuple(t.shape) for t in hires_out]
