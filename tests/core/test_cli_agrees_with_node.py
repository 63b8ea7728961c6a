"""`python -m longmedia plan` says what the nodes do: the same preflight (Setup's row cap and job latent, the
Sampler's refusal of a pass no mode fits), on the card as the nodes see it, and one verdict with figures that add
up. Each test below failed on the CLI before issue 30."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from longmedia.cli import main
from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.h3.profiles import COMFYUI_HELD_BYTES, DeviceProfile, ModelProfile
from longmedia.job.preflight import check_plan_runs
from longmedia.job.setup_plan import SetupRequest, plan_setup
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import write_tiny_h3

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *args) -> tuple[int, str, str]:
    rc = main(["plan", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def node_verdict(width: int, height: int, seconds: float, vram: float, ram: float, segment_seconds: float = 0.0,
                 model: str = "h3-int8", tokens: int = 256) -> str:
    """What LongMedia Setup and the Sampler do with this job on this card before any GPU work:
    'setup' (Setup refuses), 'sampler' (the Sampler refuses the pass) or 'runs <mode> <rows>'."""
    device = DeviceProfile.card(vram, ram, host_held_bytes=COMFYUI_HELD_BYTES)
    try:
        job = plan_setup(SetupRequest(width, height, seconds, segment_seconds=segment_seconds, prompt_tokens=tokens,
                                      ram_available_bytes=device.ram_available_bytes)).job()
    except LongMediaInputError:
        return "setup"
    p = plan(ModelProfile.preset(model), device, job.geometry, PlanRequest(), attention_resolver=default_attention_path)
    try:
        check_plan_runs(p)
    except LongMediaInputError:
        return "sampler"
    return f"runs {p.memory_mode} {p.geometry.seq_len}"


def cli_verdict(capsys, width: int, height: int, seconds: float, vram: float, ram: float,
                segment_seconds: float = 0.0, model: str = "h3-int8") -> tuple[str, int, str]:
    args = ["--width", str(width), "--height", str(height), "--seconds", str(seconds), "--vram-gb", str(vram),
            "--ram-gb", str(ram), "--model", model]
    if segment_seconds:
        args += ["--segment-seconds", str(segment_seconds)]
    rc, out, err = _run(capsys, *args)
    if rc == 2:
        return "setup", rc, err
    if "the Sampler refuses this pass" in out:
        return "sampler", rc, out
    mode = re.search(r"memory mode  (\w+)", out)[1]
    rows = re.search(r"sequence     (\d+) rows", out)[1]
    return f"runs {mode} {rows}", rc, out


# 8-48 GiB cards x jobs from 5 s to past the row cap, one pass and in segments
GRID = list(itertools.product(
    (8, 12, 16, 24, 48),
    ((1344, 768, 5), (1344, 768, 10), (1344, 768, 14.4), (1344, 768, 20), (1344, 768, 30), (1920, 1088, 10),
     (1344, 768, 150.375), (4096, 4096, 3), (16384, 16384, 1)),
    (0.0, 5.88, 10.0)))


@pytest.mark.parametrize("vram, job, segment_seconds", GRID)
def test_the_cli_verdict_is_the_node_preflight_s(vram, job, segment_seconds, capsys):
    width, height, seconds = job
    node = node_verdict(width, height, seconds, vram, 64, segment_seconds)
    cli, rc, text = cli_verdict(capsys, width, height, seconds, vram, 64, segment_seconds)
    assert cli == node, text
    if not node.startswith("runs"):
        assert rc in (2, 3)


def test_8_gb_20_s_is_refused_by_the_cli_the_node_and_the_docs(capsys):
    assert node_verdict(1344, 768, 20, 8, 64) == "sampler"
    rc, out, _ = _run(capsys, "--vram-gb", "8", "--seconds", "20")
    assert rc == 3 and "the Sampler refuses this pass before any GPU work" in out and "--segment-seconds 5.87" in out
    guide = (ROOT / "docs" / "USER_GUIDE.md").read_text(encoding="utf-8")
    assert "| 8 GiB | low_vram | low_vram | ultra_low_vram | refused before any GPU work" in guide


def test_the_row_cap_is_the_node_s(capsys):
    assert node_verdict(16384, 16384, 1, 1024, 8192) == "setup"
    rc, _, err = _run(capsys, "--width", "16384", "--height", "16384", "--seconds", "1", "--vram-gb", "1024",
                      "--ram-gb", "8192")
    assert rc == 2 and "at most 1048576 packed rows per pass" in err and err.count("\n") == 1


def test_one_verdict_the_whole_job_s(capsys):
    """The pass fits VRAM but the whole job needs more RAM: no FITS anywhere above the whole job's DOES NOT FIT."""
    rc, out, _ = _run(capsys, "--ram-gb", "8")   # the need beside the weights (process, latents, headroom) > RAM
    assert rc == 3
    verdicts = re.findall(r"\bFITS\b|DOES NOT FIT", out)
    assert verdicts and "FITS" not in verdicts and "whole-job plan: DOES NOT FIT" in out


def test_no_negative_ram_and_no_0_00_shortfall(capsys):
    _, out, _ = _run(capsys, "--ram-gb", "16", "--seconds", "30")
    assert not re.search(r"-\d+(\.\d+)? GiB", out) and "would leave" not in out
    _, out, _ = _run(capsys, "--vram-gb", "8", "--seconds", "20")
    assert "short by 0.00" not in out and "needs 6.53 GiB > 6.53 GiB" not in out
    assert not re.search(r"(\d+\.\d\d) GiB of \1 GiB usable", out)


@pytest.mark.parametrize("args", [("--seconds", "30"), ("--vram-gb", "8", "--seconds", "20"),
                                  ("--vram-gb", "12", "--seconds", "60", "--context-frames", "39",
                                   "--segment-seconds", "30")])
def test_the_segment_advice_s_frames_add_up_and_are_what_setup_plans(args, capsys):
    _, out, _ = _run(capsys, *args)
    m = re.search(r"suggested --segment-seconds ([\d.]+) fits in \w+: the first pass has (\d+) frames, each later "
                  r"pass (\d+) new \+ (\d+) context = (\d+) frames", out)
    assert m, out
    seconds, first, new, context, later = float(m[1]), *map(int, m.group(2, 3, 4, 5))
    assert new + context == later and (later - L.MIN_FRAMES) % L.CLIP_FRAMES == 0
    assert first == L.frames_for_seconds(seconds) and new == first - L.MIN_FRAMES
    total = float(args[args.index("--seconds") + 1])
    plan_ = plan_setup(SetupRequest(1344, 768, total, segment_seconds=seconds, context_frames=context))
    assert plan_.segments.segments[0].pass_frames == first
    assert max(s.pass_frames for s in plan_.segments.segments[1:]) == later


def test_the_advice_is_one_flag_text(capsys):
    _, out, _ = _run(capsys, "--vram-gb", "8", "--seconds", "20")
    assert "--segment-seconds=" not in out and "(--segment-seconds" not in out
    assert "try --segment-seconds 5.87" in out


def test_a_chosen_mode_that_does_not_fit_is_told_auto_first(capsys):
    rc, out, _ = _run(capsys, "--memory-mode", "normal", "--seconds", "20")
    assert rc == 3
    fix = out.split("to make it fit:")[1].split("\n\n")[0]
    assert fix.index("--memory-mode auto (it picks low_vram") < fix.index("--segment-seconds")


def test_a_short_segment_blames_segment_seconds_unless_context_was_given(capsys):
    rc, _, err = _run(capsys, "--segment-seconds", "0.5")
    assert rc == 2 and err.startswith("longmedia plan: error: --segment-seconds=0.5 is not allowed: expected at least")
    assert "--context-frames=" not in err and "set --context-frames to 5" in err
    rc, _, err = _run(capsys, "--segment-seconds", "0.5", "--context-frames", "22")
    assert rc == 2 and "--context-frames=22 is not allowed" in err


def test_minus_one_and_zero_get_one_range_text(capsys):
    texts = set()
    for value in ("-1", "0", "1000"):
        rc, _, err = _run(capsys, "--segment-seconds", value)
        assert rc == 2
        texts.add(err.split("expected ")[1].split(".")[0])
    assert texts == {"a number above 0 up to 150"}


def test_sft_checkpoints_are_read_like_safetensors(tmp_path, capsys):
    path = Path(write_tiny_h3(tmp_path / "tiny.safetensors", variant="int8")).rename(tmp_path / "tiny.sft")
    rc, out, err = _run(capsys, "--model", str(path), "--seconds", "2", "--width", "256", "--height", "256")
    assert rc == 0 and err == "" and "int8" in out


def test_a_segment_as_long_as_the_job_is_one_pass_as_in_setup(capsys):
    assert node_verdict(1344, 768, 10, 16, 64, segment_seconds=20).startswith("runs normal ")
    rc, out, _ = _run(capsys, "--seconds", "10", "--segment-seconds", "20")
    assert rc == 0 and "--segment-seconds 20 covers the whole 10.125 s job: one pass" in out


def test_a_directory_is_not_called_a_preset(tmp_path, capsys):
    rc, _, err = _run(capsys, "--model", str(tmp_path))
    assert rc == 2 and "That is a directory: point at the checkpoint file inside it" in err
    assert "Name a preset" not in err


def test_the_reserve_limit_reads_plainly(capsys):
    rc, _, err = _run(capsys, "--vram-activation-reserve-mb", "16000")
    assert rc == 2 and "MiB of VRAM usable for the job on the 16 GB card with 64 GB RAM (16.00 GiB in all);" in err
    assert "(free VRAM) of" not in err and "RAM, 16.00 GiB in all" not in err


@pytest.mark.parametrize("reader, first", [("head -1", "LongMedia whole-job plan: FITS (every stage; about 69 min in "
                                                        "all, an estimate)\n"), ("true", "")])
def test_a_closed_pipe_ends_quietly(reader, first):
    """`longmedia plan | head -1`: the reader leaves early (`true` before anything is read, so the write always
    meets a closed pipe); no BrokenPipeError traceback either way."""
    proc = subprocess.run(f"{sys.executable} -m longmedia plan | {reader}", shell=True, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.stdout == first and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.parametrize("flag, value, nearest", [("width", 1000, "992 or 1024"), ("height", 770, "768 or 800"),
                                                  ("width", 100, "96 or 128")])
def test_an_edge_off_the_32_px_grid_is_refused_by_both_with_the_nearest_values(capsys, flag, value, nearest):
    """Issue 47: the CLI planned --width 1000 as 992 while Setup refuses 1000; both now refuse, naming the two
    nearest sizes, and the CLI names its own flag."""
    size = {"width": 1344, "height": 768, flag: value}
    with pytest.raises(LongMediaInputError, match=f"Use {nearest}") as info:
        plan_setup(SetupRequest(width=size["width"], height=size["height"], seconds=10.0))
    assert info.value.input_name == flag
    rc, out, err = _run(capsys, f"--{flag}", str(value))
    assert rc == 2 and not out and f"error: --{flag}={value} is not allowed" in err and f"Use {nearest}." in err, err
