"""`python -m longmedia plan`: the reference job by default, options, JSON, exit code 2 on bad input."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from longmedia.cli import main
from longmedia.testing.tiny_h3 import write_tiny_h3

REPO = Path(__file__).resolve().parents[2]


def test_no_arguments_plans_the_reference_job(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for text in ("h3-int8", "16 GB (16.00 GiB) card, 64 GB (64.00 GiB) RAM", "1344x768", "10.125 s (243 frames)",
                 "reference budget low", "memory mode  normal (requested auto)", "FITS", "reasons:",
                 "prefetch     off"):
        assert text in out, text
    assert main(["plan"]) == 0 and capsys.readouterr().out == out


def test_options_reach_the_plan(capsys):
    args = ["plan", "--vram-gb", "8", "--ram-gb", "32", "--model", "h3-nvfp4", "--width", "1280", "--height", "704",
            "--seconds", "30", "--picture", "1024x1024", "--video", "640x360:3:audio", "--audio", "4",
            "--reference-budget", "medium", "--memory-mode", "ultra_low_vram", "--attention-mode", "existing",
            "--mlp-chunk-tokens", "2048", "--late-block-guard-start", "40", "--no-dynamic-vram", "--json"]
    rc = main(args)
    d = json.loads(capsys.readouterr().out)
    assert rc == (0 if d["fits"] and d["whole_job"]["fits"] else 3)
    assert d["memory_mode"] == "ultra_low_vram" and d["requested_memory_mode"] == "ultra_low_vram"
    assert d["chunks"]["mlp_chunk_tokens"] == 2048 and d["guards"]["late_block_guard_start"] == 40
    assert d["manual_fields"] == ["mlp_chunk_tokens", "late_block_guard_start"]
    assert d["device"]["dynamic_vram"] is False and d["model"]["quantization"] == "nvfp4"
    kinds = [s["kind"] for s in d["geometry"]["row_spans"]]
    assert kinds == ["text", "ref_img", "ref_audio", "ref_img", "ref_audio", "audio", "video"]
    assert d["attention"]["mode"] == "existing"


def test_safetensors_model_path(tmp_path, capsys):
    path = write_tiny_h3(tmp_path, variant="int8")
    assert main(["plan", "--model", str(path), "--json", "--seconds", "2", "--width", "256", "--height", "256"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"]["quantization"] == "int8" and d["model"]["source"] == "safetensors header"


@pytest.mark.parametrize("args, name", [
    (["--width", "7"], "--width=7"), (["--seconds", "0"], "--seconds"), (["--fps", "30"], "--fps=30"),
    (["--vram-gb", "1"], "--vram-gb"), (["--mlp-chunk-tokens", "5"], "--mlp-chunk-tokens=5"),
    (["--late-block-guard-start", "99"], "--late-block-guard-start=99"), (["--model", "h3-int4"], "--model"),
    (["--seconds", "5", "--frames", "100"], "--frames"), (["--segment-seconds", "0"], "--segment-seconds"),
])
def test_bad_input_exits_2_naming_the_input_and_range(args, name, capsys):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert name in err and "expected" in err


@pytest.mark.parametrize("args", [["--memory-mode", "turbo"], ["--picture", "big"], ["--video", "640x360"],
                                  ["--bogus"], ["--width", "wide"]])
def test_argparse_errors_exit_2(args, capsys):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("longmedia plan: error: ") and err.count("\n") == 1, err


def test_module_entry_point_is_fast_and_torch_free():
    code = ("import sys, time; t = time.perf_counter(); from longmedia.cli import main; rc = main([]); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', time.perf_counter() - t); sys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    flag, seconds = run.stdout.strip().splitlines()[-1].split()
    assert flag == "NO-TORCH" and float(seconds) < 1.0
    assert time.perf_counter() - start < 30
    mod = subprocess.run([sys.executable, "-m", "longmedia", "plan", "--width", "9"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert mod.returncode == 2 and "--width=9" in mod.stderr
