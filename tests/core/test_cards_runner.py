"""The card bench's runner (bench/cards/entry.py): --extras-which picks the extras (interrupt brings seeds; no name runs them all), and a
card's child that dies mid-row is restarted past that row."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from bench import latent_diff
from bench.cards import cells, extras, measure, prompts, rows, tables
from bench.cards import entry as cards
from bench.cards.rows import Cell

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("which,ran", [
    (None, ["oom", "seeds", "interrupt", "segmented", "sol", "scheduled_sol"]),
    (["interrupt"], ["seeds", "interrupt"]),
    (["scheduled_sol", "oom"], ["oom", "scheduled_sol"]),
])
def test_extras_which_picks_the_extras_in_run_order(monkeypatch, which, ran):
    seen: list[str] = []
    monkeypatch.setattr(extras, "oom_rows", lambda bench: seen.append("oom"))
    monkeypatch.setattr(extras, "seed_reruns", lambda bench, state: seen.append("seeds"))
    monkeypatch.setattr(extras, "interrupt_rerun", lambda bench, state: seen.append("interrupt"))
    monkeypatch.setattr(extras, "segmented", lambda bench: seen.append("segmented"))
    monkeypatch.setattr(extras, "attention_row", lambda bench, attention: seen.append(attention))
    a = types.SimpleNamespace(extras_which=which, deadline=float("inf"))
    extras.run_extras(types.SimpleNamespace(a=a, out_of_time=lambda: False))
    assert seen == ran


def test_extras_which_is_a_checked_cli_choice_passed_to_the_card():
    assert cards.parse(["--extras-only", "--extras-which", "sol", "scheduled_sol"]).extras_which == [
        "sol", "scheduled_sol"]
    with pytest.raises(SystemExit):
        cards.parse(["--extras-which", "everything"])


def test_a_child_that_dies_mid_row_is_restarted_past_that_row(monkeypatch, tmp_path):
    """The 12 GiB card's child died after one cell on the H200 and its later cells were never run: the parent
    now writes the lost cell's row and starts the child again for the cells left."""
    import json
    import subprocess

    crash_at = Cell("bf16", 10.0, "stock")
    children = []

    def fake_run(cmd, **kw):
        if "--child" not in cmd:  # the checkpoint generator
            return subprocess.CompletedProcess(cmd, 0, "ok", "")
        args = cards.parse(cmd[4:])  # python -P -m bench.cards --child ...
        done = rows.done_cells(rows.read_rows(args.out / "cards.jsonl"), args.child)
        children.append(len(done))
        for cell in cells.grid(args):
            if cell in done:
                continue
            if cell == crash_at and len(children) == 1:
                return subprocess.CompletedProcess(cmd, -11)   # died inside this cell, before its row
            with open(args.out / "cards.jsonl", "a") as f:
                f.write(json.dumps({"card_gib": args.child, "format": cell.format, "seconds": cell.seconds,
                                    "sampler": cell.sampler, "label": cell.sampler, "result": "ok", "width": 1344, "height": 768, "blocks": 2})
                        + "\n")
        return subprocess.CompletedProcess(cmd, 0)

    _fake_comfyui(monkeypatch, tmp_path)
    monkeypatch.setattr(cards.subprocess, "run", fake_run)
    assert cards.main(["--cards", "12", "--formats", "bf16", "--seconds", "10", "14.4", "--simulate", "reserve",
                       "--out", str(tmp_path), "--models", str(tmp_path / "m")]) == 0
    written = rows.read_rows(tmp_path / "cards.jsonl")
    assert children == [0, 2]  # the second child found the first cell done and the lost one recorded
    assert [(r["seconds"], r["sampler"], r["result"][:5]) for r in written] == [
        (10.0, "longmedia", "ok"), (10.0, "stock", "error"), (14.4, "longmedia", "ok"), (14.4, "stock", "ok")]
    assert "child process died (exit -11)" in written[1]["result"]
    assert written[1]["frames"] == 243 and written[1]["blocks"] == 2 and "device" not in written[1]


def test_a_refusal_s_advice_is_read_back_as_the_segment_length_to_run():
    """The refusal's typed suggestion (LongMediaInputError.suggestion, recorded by measure), never its text."""
    import random

    seconds = round(random.Random(85).uniform(2, 12), 2)
    refused = {"sampler": "longmedia", "result": "error", "error": "longmedia.errors.LongMediaInputError: ...",
               "suggestion": {"input": "segment_seconds", "value": seconds}}
    assert cells.advised_segment_seconds(refused) == seconds
    assert cells.advised_segment_seconds({**refused, "sampler": "stock"}) is None
    assert cells.advised_segment_seconds({**refused, "suggestion": {"input": "width", "value": 640}}) is None
    text_only = {**refused, "error": f"... set Setup's segment_seconds to {seconds}; ...", "suggestion": None}
    assert cells.advised_segment_seconds(text_only) is None  # the message is not parsed
    assert cells.advised_segment_seconds({"sampler": "longmedia", "result": "OOM", "error": "CUDA out of memory"}) is None


def test_measure_records_a_refusal_s_typed_suggestion():
    from longmedia.errors import LongMediaInputError, Suggestion

    class Executor:  # a PromptExecutor after a node raised (`measure.executor_class` keeps the exception)
        success = False
        status_messages = [("execution_error", {"exception_type": "LongMediaInputError", "exception_message": "x"})]
        last_error = LongMediaInputError("latent", "big", "smaller", "Set segment_seconds to 4.5.",
                                         suggestion=Suggestion("segment_seconds", 4.5))

    class Memory:
        def peak(self):
            return {"process_bytes": 0, "device_used_bytes": 0, "process_source": "test"}

    class Torch:
        class cuda:  # noqa: N801  (mirrors torch.cuda)
            max_memory_allocated = staticmethod(lambda: 0)

    mm = types.SimpleNamespace(current_loaded_models=[])
    out = measure.measure(Executor(), None, [], Memory(), Torch, mm, 0.0)
    assert out["result"] == "error" and out["suggestion"] == {"input": "segment_seconds", "value": 4.5}
    assert cells.advised_segment_seconds({"sampler": "longmedia", **out}) == 4.5
    Executor.last_error = RuntimeError("VRAM grow failed")
    assert "suggestion" not in measure.measure(Executor(), None, [], Memory(), Torch, mm, 0.0)


def test_the_compare_table_puts_longmedia_and_stock_side_by_side():
    gib = 2 ** 30
    base = {"card_gib": 8.0, "format": "int8", "seconds": 20.0, "frames": 481}
    rows = [{**base, "sampler": "longmedia", "result": "error",
             "error": "longmedia.errors.LongMediaInputError: ... set Setup's segment_seconds to 5.88; ..."},
            {**base, "sampler": "longmedia_advised", "label": "longmedia, as advised: segment_seconds 5.88",
             "result": "ok", "s_per_step": 0.3, "process_peak_bytes": int(7.5 * gib)},
            {**base, "sampler": "stock", "result": "error", "error": "RuntimeError: VRAM grow failed: 905774080 bytes",
             "process_peak_bytes": 8 * gib},
            {**base, "seconds": 5.0, "frames": 124, "sampler": "longmedia", "result": "ok", "memory_mode": "low_vram",
             "s_per_step": 0.26, "process_peak_bytes": 7 * gib, "torch_peak_bytes": 3 * gib,
             "torch_reserved_peak_bytes": 3 * gib, "predicted_block_bytes": 3 * gib, "measured_block_bytes": 3 * gib}]
    lines = tables.compare(rows).splitlines()
    assert len(lines) == 4 and "5 s (124 fr)" in lines[2] and "20 s (481 fr)" in lines[3]  # sorted by job length
    assert "| low_vram | ok | 0.26 | 7.00 | 3.00 | 3.00 | 3.00 / 3.00 (block) | - / - | not run |" in lines[2]
    assert "| as advised, segment_seconds 5.88: ok at 7.50 GiB process peak | refused before any GPU work |" in lines[3]
    assert "| OOM (aimdo cast buffer) | - | 8.00 |" in lines[3]


def test_the_injected_oom_rows_run_on_the_full_depth_model_unless_told():
    assert cards.parse(["--blocks", "50", "--extras-only"]).oom_blocks == 50
    assert cards.parse(["--blocks", "50", "--extras-only", "--oom-blocks", "2"]).oom_blocks == 2


def test_the_injected_oom_rows_take_the_modes_asked_for(monkeypatch):
    ran = []
    a = cards.parse(["--extras-only", "--oom-modes", "normal"])
    assert a.oom_modes == ["normal"] and cards.parse([]).oom_modes == ["normal", "low_vram"]

    class Bench:
        def __init__(self):
            self.a = types.SimpleNamespace(oom_blocks=2, oom_modes=a.oom_modes)

        def unet(self, blocks):
            return "m"

        def row(self, label, seconds, blocks, **extra):
            return {"label": label, **extra}

        def out_of_time(self):
            return False

        def reading(self):
            return {"torch_allocated": 0, "process": None}

        def job(self, *args, **kw):
            return kw

        def run(self, row, prompt, prompt_id):
            ran.append(prompt["memory_mode"])
            row["result"] = "OOM"

        def write(self, row):
            pass

    extras.oom_rows(Bench())
    assert ran == ["normal"] * len(extras.PHASES)


def test_a_completed_prompt_with_nan_in_its_latent_is_not_ok():
    assert measure.output_result({"finite": True, "std": 1.45, "checksum": -4.1e5}) == "ok"
    assert measure.output_result({"finite": False, "std": float("nan"), "checksum": float("nan")}) == "non-finite output"
    assert measure.output_result(None) == "ok"  # a prompt without the sink (none in this bench) has nothing to judge


def _fake_comfyui(monkeypatch, tmp_path) -> None:
    """A device and a ComfyUI checkout as the parent sees them (a folder with main.py; nothing is imported)."""
    (tmp_path / "comfy").mkdir(exist_ok=True)
    (tmp_path / "comfy" / "main.py").touch()
    monkeypatch.setenv("LONGMEDIA_COMFYUI_ROOT", str(tmp_path / "comfy"))
    monkeypatch.setattr(cards, "_gpu_and_comfyui", lambda: True)


def _children(monkeypatch, tmp_path, argv: list[str]) -> list:
    """cards.main(argv) with the card processes stubbed: the arguments each card's child was started with."""
    import subprocess

    seen = []

    def fake_run(cmd, **kw):
        if "--child" in cmd:
            assert cmd[1:4] == ["-P", "-m", "bench.cards"] and kw["env"]["PYTHONPATH"].startswith(str(tmp_path / "comfy"))
            seen.append(cards.parse(cmd[4:]))
        return subprocess.CompletedProcess(cmd, 0, "ok", "")

    _fake_comfyui(monkeypatch, tmp_path)
    monkeypatch.setattr(cards.subprocess, "run", fake_run)
    assert cards.main([*argv, "--simulate", "reserve", "--out", str(tmp_path), "--models", str(tmp_path / "m")]) == 0
    return seen


def test_latents_reach_the_card_process_and_each_sink_saves_to_its_own_file(monkeypatch, tmp_path):
    """--latents goes to every card's child; the prompt's sink (stock and LongMedia alike) gets the path."""
    children = _children(monkeypatch, tmp_path, ["--cards", "16", "120", "--latents", str(tmp_path / "lat")])
    assert [c.latents for c in children] == [tmp_path / "lat"] * 2
    for sampler in ("stock", "longmedia"):
        p = prompts.prompt("m.safetensors", 5, 1, 42, sampler, 16, latent_path=f"/x/{sampler}.pt")
        assert p["sink"]["inputs"]["save_path"] == f"/x/{sampler}.pt"
    assert prompts.prompt("m.safetensors", 5, 1, 42, "stock", 16)["sink"]["inputs"]["save_path"] == ""


def test_latent_diff_passes_a_bf16_round_trip_and_fails_nan_or_a_wrong_latent(tmp_path):
    import torch

    ref = torch.randn(24, 5, 6, 7, generator=torch.Generator().manual_seed(3))
    assert latent_diff.diff_row(ref, ref.clone()) == {"finite": True, "equal": True, "max_abs": 0.0, "rel": 0.0}
    near = latent_diff.diff_row(ref, ref.bfloat16().float())
    assert not near["equal"] and 0 < near["rel"] < 2e-2
    other = torch.randn(24, 5, 6, 7, generator=torch.Generator().manual_seed(4))
    for name, x in (("ref", ref), ("near", ref.bfloat16().float()), ("other", other)):
        torch.save(x, tmp_path / f"{name}.pt")
    assert latent_diff.table(tmp_path / "ref.pt", [tmp_path / "near.pt"], 2e-2) == 0
    assert latent_diff.table(tmp_path / "ref.pt", [tmp_path / "near.pt", tmp_path / "other.pt"], 2e-2) == 1
    assert latent_diff.table(tmp_path / "ref.pt", [tmp_path / "gone.pt", tmp_path / "near.pt"], 2e-2) == 1
    nan = ref.clone()
    nan[0, 0, 0, 0] = float("inf")
    assert latent_diff.diff_row(ref, nan)["finite"] is False
    with pytest.raises(ValueError, match="shape"):
        latent_diff.diff_row(ref, ref[:, :2])
    assert latent_diff.main(["--smoke"]) == 0


def test_a_repeated_sampler_is_its_own_row_and_runs_the_same_prompt():
    """`stock#2` runs stock again in the same card process (its own cell, so a restart does not skip it)."""
    a = cards.parse(["--samplers", "stock", "longmedia_existing", "stock#2", "--formats", "int8", "--seconds", "5"])
    assert cells.grid(a) == [Cell("int8", 5.0, "stock"), Cell("int8", 5.0, "longmedia_existing"),
                             Cell("int8", 5.0, "stock#2")]
    assert prompts.base_sampler("stock#2") == "stock" and prompts.base_sampler("longmedia") == "longmedia"
    assert prompts.prompt("m.safetensors", 5, 1, 42, "stock", 16)["sample"]["class_type"] == "SamplerCustomAdvanced"
    for bad in ("stock#1", "stock#x", "everything", "everything#2"):
        with pytest.raises(SystemExit):
            cards.parse(["--samplers", bad])
    row = {"sampler": "stock#2", "label": "stock#2", "card_gib": 16.0, "format": "int8", "seconds": 5.0,
           "frames": 125, "blocks": 2, "result": "ok", "width": 1344, "height": 768}
    assert "| stock |" in tables.tables([row])  # mode column: a stock repeat is stock


def test_kernel_table_records_the_kernels_with_the_most_time(monkeypatch):
    """On the CPU the profiler's CPU times stand in for device times (the same table, other numbers)."""
    import torch
    from torch.profiler import ProfilerActivity

    from bench.cards import probes

    monkeypatch.setattr(probes, "_device_us", lambda e: float(e.self_cpu_time_total))
    real = torch.profiler.profile
    monkeypatch.setattr(torch.profiler, "profile", lambda activities: real(activities=[ProfilerActivity.CPU]))
    row: dict = {}
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(271))
    with probes.kernel_table(row, top=5):
        for _ in range(3):
            x = torch.mm(x, x).tanh()
    names = [k[0] for k in row["kernels"]]
    assert len(row["kernels"]) <= 5 and any("mm" in n for n in names), row
    assert all(calls >= 1 and ms >= 0 for _, calls, ms in row["kernels"])
    times = [ms for _, _, ms in row["kernels"]]
    assert times == sorted(times, reverse=True)


def test_kernels_reach_the_card_process(monkeypatch, tmp_path):
    assert [c.kernels for c in _children(monkeypatch, tmp_path, ["--cards", "120", "--kernels"])] == [True]
    assert [c.kernels for c in _children(monkeypatch, tmp_path, ["--cards", "120"])] == [False]


def test_child_env_puts_the_checkout_then_the_repo_first_and_the_check_finds_a_namespace_comfy(monkeypatch, tmp_path):
    """ComfyUI's `comfy` has no __init__.py: `comfy_importable_from` reads the namespace's folders (a check on
    `origin` alone is None there, and the stage_bytes re-run looped on it)."""
    import importlib
    import sys

    from bench.cards import comfy_process

    root = tmp_path / "ComfyUI"
    (root / "comfy").mkdir(parents=True)
    (root / "main.py").touch()
    env = comfy_process.child_env("/repo", {"LONGMEDIA_COMFYUI_ROOT": str(root), "PYTHONPATH": "/site"})
    assert env["PYTHONPATH"].split(":") == [str(root), "/repo", "/site"]
    with pytest.raises(comfy_process.ComfyStartError):
        comfy_process.child_env("/repo", {"LONGMEDIA_COMFYUI_ROOT": str(tmp_path / "nothing")})
    for name in [m for m in sys.modules if m == "comfy" or m.startswith("comfy.")]:
        monkeypatch.delitem(sys.modules, name)
    assert not comfy_process.comfy_importable_from(str(root))
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    assert comfy_process.comfy_importable_from(str(root))


def test_the_card_child_imports_no_torch_before_comfyui_starts():
    # ComfyUI's cuda_malloc picks torch's allocator before torch loads; a module that imports torch at the child's
    # import time makes torch parse another backend first (the device said: "cudaMallocAsync != native")
    code = "import sys; import bench.cards.child, bench.cards.entry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
