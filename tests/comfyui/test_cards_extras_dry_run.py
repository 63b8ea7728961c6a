"""A CPU dry run of `python -m bench.cards --extras`: every extra through ComfyUI's real PromptExecutor on the tiny
checkpoint (a 128x96 canvas, tiny conditioning), with the bench's own prompt builder, `measure.measure` and checks.

Only the device readings are stand-ins (no CUDA here): torch's CUDA counters read 0 and the prompt-free
memory readings are constant, so this proves the sequencing, the prompts, the result parsing and the
checks, not the GPU's numbers.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import types

import pytest


class _NoCuda:
    """torch as `measure.measure` uses it, without CUDA."""

    class cuda:  # noqa: N801  (mirrors torch.cuda)
        @staticmethod
        def max_memory_allocated(*a):
            return 0


class _Memory:
    def peak(self):
        return {"process_bytes": 0, "device_used_bytes": 0, "process_source": "dry run"}


@pytest.fixture(scope="module")
def bench_env(comfy_inprocess, tiny_checkpoints, tmp_path_factory):
    from bench.cards import comfy_process

    comfy_process.load_builtin_nodes()
    import comfy.utils
    import execution
    import folder_paths

    from bench.cards import nodes

    nodes.register()
    models = tmp_path_factory.mktemp("cards_models")
    for blocks in (2, 50):  # the tiny checkpoint under the names the bench asks for
        shutil.copy(tiny_checkpoints["int8"], models / f"full_h3_int8_{blocks}blocks.safetensors")
    folder_paths.add_model_folder_path("diffusion_models", str(models))
    return {"execution": execution, "utils": comfy.utils}


@dataclasses.dataclass(frozen=True)
class _CpuMark:
    """A step clock mark on the CPU's timeline (no CUDA here: the device and the CPU are one)."""

    t: float

    @classmethod
    def now(cls):
        return cls(time.perf_counter())

    def seconds_until(self, later) -> float:
        return later.t - self.t


def test_every_extra_writes_its_checked_rows(bench_env, monkeypatch, tmp_path):
    import comfy.model_management as mm
    import torch

    import longmedia.h3.dims
    from bench.cards import extras, measure, nodes, prompts, tables
    from bench.cards.step_clock import StepClock
    from longmedia.h3.profiles import DeviceProfile
    from longmedia.testing.tiny_h3 import TINY_DIMS

    monkeypatch.setattr(prompts, "JOB", (128, 96))
    monkeypatch.setattr(longmedia.h3.dims, "H3_FULL", TINY_DIMS)  # the bench conditioning at the tiny width
    monkeypatch.setattr(nodes, "card_profile", lambda card, simulate: DeviceProfile.card(card, 64))
    # the first rung is never reached (as 60 was not on the H200's 2-block prompt): the ladder's next one fires
    monkeypatch.setattr(extras, "INTERRUPT_LADDER", (10 ** 6, 5))
    execution, utils = bench_env["execution"], bench_env["utils"]
    clock = StepClock(new_mark=_CpuMark.now)  # the child's step clock, with the CPU's timeline for the device's
    server = prompts.Server(on_sample_start=clock.start)
    steps_at: list[float] = []

    def hook(value, total, preview, prompt_id=None, node_id=None):
        steps_at.append(time.perf_counter())
        clock.step()
        mm.throw_exception_if_processing_interrupted()

    utils.set_progress_bar_global_hook(hook)
    executor = execution.PromptExecutor(server, cache_type=execution.CacheType.CLASSIC,
                                        cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})

    def run(row, p, prompt_id, *, unload=True):  # the child's run(), less its CUDA calls and its unloading:
        # on the CPU, ComfyUI's reload of an unloaded INT8 model inside the executor's inference_mode fails
        # in its own partially_load ("Cannot set version_counter for inference tensor"); the GPU's dynamic
        # patcher reloads (the table's rows do it between every row)
        del unload
        steps_at.clear()
        clock.reset()
        server.events.clear()
        t0 = time.perf_counter()
        executor.execute(p, prompt_id, {"client_id": "bench"}, ["sink"])
        row.update(measure.measure(executor, server, steps_at, _Memory(), _NoCuda, mm, t0, clock))
        return row

    rows: list[dict] = []
    a = types.SimpleNamespace(blocks=50, extras_steps=1, extras_seconds=5.0, oom_blocks=2, simulate="ballast",
                              deadline=time.time() + 3600)
    bench = extras.Bench(a=a, card=16.0, base={"card_gib": 16.0}, run=run,
                                reading=lambda: {"torch_allocated": 0, "process": None, "aimdo_usage": None},
                                write=rows.append, steps_at=steps_at, prompt=prompts.prompt)
    with torch.inference_mode(False):  # the executor enters inference_mode itself, as in the prompt worker
        extras.run_extras(bench)
    utils.set_progress_bar_global_hook(None)
    by_label = {r["label"]: r for r in rows}
    assert all(r.get("extra") and r.get("check") in ("pass", "fail") for r in rows)
    timed = [r for r in rows if r.get("result") == "ok"]
    assert timed and all(r["step_clock"] == "device" and r["first_step_s"] > 0 for r in timed)
    assert all(len(r["steps_s"]) == len(r.get("report_steps") or [None]) - 1 for r in timed if not r.get("segments"))
    ooms = [r for r in rows if r.get("injected_phase")]
    assert len(ooms) == 12 and all(r["check"] == "pass" for r in ooms), [(r["label"], r["detail"]) for r in ooms]
    seeds = by_label["check: seed-only reruns, same boundary snapshot and plan"]
    assert seeds["check"] == "pass" and seeds["detail"].startswith("same plan and boundary"), seeds["detail"]
    interrupt = next(r for r in rows if r["label"].startswith("interrupt"))
    assert interrupt["result"] == "interrupted" and interrupt["check"] == "pass", interrupt["detail"]
    assert interrupt["interrupt_call"] == 5 and interrupt["label"].startswith("interrupt at check 5")
    segmented = next(r for r in rows if r["label"].startswith("segmented"))
    assert [p["pass_frames"] for p in segmented["segments"]] == [124, 124, 124]
    assert "ratio 3:1" in segmented["detail"]
    assert all(by_label[a]["check"] == "pass" for a in ("sol", "scheduled_sol")), [by_label[a] for a in ("sol",)]
    table = tables.tables(rows)
    assert "\nextras\n| extra |" in table and "| check: seed-only reruns, same boundary snapshot and plan |" in table
    json.dumps(rows, default=str)  # every row serialises as cards.jsonl writes it


def test_saved_latents_compare_stock_with_longmedia(bench_env, monkeypatch, tmp_path):
    """`python -m bench.cards --latents` on the CPU: stock and LongMedia (normal mode, ComfyUI's attention) save their latents
    through the bench sink, and bench/latent_diff.py finds them bit-equal; low_vram within tolerance."""
    import torch

    from bench import latent_diff
    from bench.cards import prompts

    executor = _tiny_prompt_executor(bench_env, monkeypatch)
    runs = {"stock": ("stock", "auto", "auto"), "normal": ("longmedia", "existing", "normal"),
            "low_vram": ("longmedia", "existing", "low_vram")}
    with torch.inference_mode(False):
        for name, (sampler, attention, mode) in runs.items():
            p = prompts.prompt("full_h3_int8_2blocks.safetensors", 5, 1, 42, sampler, 16, attention, "ballast", mode,
                             latent_path=str(tmp_path / f"{name}.pt"))
            executor.execute(p, name, {"client_id": "bench"}, ["sink"])
            assert executor.success, executor.status_messages[-1:]
    ref = torch.load(tmp_path / "stock.pt")
    assert ref.ndim == 5 and float(ref.std()) > 0  # batch, channels, frames, height, width
    assert latent_diff.diff_row(ref, torch.load(tmp_path / "normal.pt"))["equal"]
    low = latent_diff.diff_row(ref, torch.load(tmp_path / "low_vram.pt"))
    assert low["finite"] and low["rel"] <= 1e-5, low


def test_a_repeat_row_samples_again_instead_of_being_served_from_the_node_cache(bench_env, monkeypatch, tmp_path):
    """`--samplers stock stock#2`, the first-prompt control pair: the repeat's prompt equals the first's, so ComfyUI's
    executor would serve the sampler's cached output and nothing would sample (the H200 run of 2026-12-04: 0.87 GiB,
    no steps). The bench frees the node cache before a repeat, as ComfyUI's "free memory" request does; the repeat
    then runs its steps, and on the CPU gives the first run's latent bit for bit."""
    import comfy.utils
    import torch

    from bench.cards import prompts

    executor = _tiny_prompt_executor(bench_env, monkeypatch)
    steps: list[int] = []
    sampled: dict[str, int] = {}  # progress events of each row's prompt
    comfy.utils.set_progress_bar_global_hook(lambda value, total, preview, **kw: steps.append(value))
    try:
        with torch.inference_mode(False):
            for row in ("stock", "stock#2"):
                p = prompts.prompt("full_h3_int8_2blocks.safetensors", 5, 2, 42, prompts.base_sampler(row), 16,
                                   latent_path=str(tmp_path / f"{row}.pt"))
                before = len(steps)
                prompts.execute(executor, p, row, row)
                assert executor.success, executor.status_messages[-1:]
                sampled[row] = len(steps) - before
    finally:
        comfy.utils.set_progress_bar_global_hook(None)
    assert sampled == {"stock": 2, "stock#2": 2}, sampled
    assert torch.equal(torch.load(tmp_path / "stock.pt"), torch.load(tmp_path / "stock#2.pt"))


def _tiny_prompt_executor(bench_env, monkeypatch):
    """A PromptExecutor for the bench's own prompts at the tiny width (a 128x96 canvas, the tiny checkpoint's dims and
    a 64 GiB host), with the child's classic node cache."""
    import longmedia.h3.dims
    from bench.cards import nodes, prompts
    from longmedia.h3.profiles import DeviceProfile
    from longmedia.testing.tiny_h3 import TINY_DIMS

    monkeypatch.setattr(prompts, "JOB", (128, 96))
    monkeypatch.setattr(longmedia.h3.dims, "H3_FULL", TINY_DIMS)
    monkeypatch.setattr(nodes, "card_profile", lambda card, simulate: DeviceProfile.card(card, 64))
    execution = bench_env["execution"]
    return execution.PromptExecutor(prompts.Server(), cache_type=execution.CacheType.CLASSIC,
                                    cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})
