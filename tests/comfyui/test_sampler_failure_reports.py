"""The sampler core's failure reports, in-process on the tiny checkpoints: an OOM names the phase and block where
it happened (injected per phase, normal and streamed), a NaN latent is reported first with what to try, and
LONGMEDIA_PROBES names the first non-finite stage."""

from __future__ import annotations

import json

import pytest
import torch
from harness import run_longmedia, sampler_job

from longmedia.planning.types import PlanRequest
from longmedia.report.oom import LongMediaOOM


def test_injected_oom_raises_fact_report_and_next_run_succeeds(sampler_env, monkeypatch):
    from longmedia.comfy.patching import block_patch as comfy_patch

    real = comfy_patch.run_block
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        phase = kwargs["phase"]
        with phase("attention"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(comfy_patch, "run_block", failing)
    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64)
    with pytest.raises(LongMediaOOM) as info:
        run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert isinstance(info.value, torch.OutOfMemoryError)
    assert info.value.report.phase == "attention" and info.value.report.block_index == 0
    assert "change next" in str(info.value)
    monkeypatch.setattr(comfy_patch, "run_block", real)
    (ov, _), _, _ = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert torch.isfinite(ov).all()


def _oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class _FailingQueue(list):
    """A prefetch queue whose transport runs out of memory (what staging the next block's weights can do)."""

    def pop(self, index=-1):
        _oom()


def _prefetch_fails(monkeypatch):
    import comfy.model_prefetch

    monkeypatch.setattr(comfy.model_prefetch, "make_prefetch_queue", lambda *a, **k: _FailingQueue([None]))


@pytest.mark.parametrize("where,phase,block", [
    ("blocks.1.attn.qkv_proj", "qkv", 1),
    ("blocks.0.attention", "attention", 0),
    ("blocks.1.mlp.fc1", "mlp", 1),
    ("final_layer.norm", "final_output", None),
    ("prefetch", "prefetch_transport", 0),
    ("token_refiner", "before_block_0", None),
])
def test_normal_mode_oom_names_where_it_happened(sampler_env, monkeypatch, where, phase, block):
    """Normal mode replaces nothing of the model (it stays bit-exact), so the phase comes from the traceback:
    an OOM in a block, the final layer or the prefetch transport was reported as before_block_0."""
    import comfy.ldm.minimax.model as h3

    model = sampler_env["models"]["fp32"].model.diffusion_model
    if where == "prefetch":
        _prefetch_fails(monkeypatch)
    elif where == "blocks.0.attention":
        real = h3.optimized_attention

        def failing(q, k, v, heads, **kwargs):  # the DiT's joint attention, not the text refiner's
            if (k.peek() if hasattr(k, "peek") else k).shape[2] > 20:
                _oom()
            return real(q, k, v, heads, **kwargs)
        monkeypatch.setattr(h3, "optimized_attention", failing)
    else:
        target = model.token_refiner.blocks[0].mlp.fc1 if where == "token_refiner" else model.get_submodule(where)
        monkeypatch.setitem(target.__dict__, "forward", _oom)
    with pytest.raises(LongMediaOOM) as info:
        run_longmedia(sampler_env, PlanRequest(memory_mode="normal", attention_mode="existing"),
                      *sampler_job(sampler_env))
    report = info.value.report
    assert (report.phase, report.block_index) == (phase, block)
    if phase == "prefetch_transport":
        assert "not the cause" in report.next_step and report.pressure_point == "--disable-async-offload"
    monkeypatch.undo()
    (ov, _), _, _ = run_longmedia(sampler_env, PlanRequest(memory_mode="normal", attention_mode="existing"),
                                  *sampler_job(sampler_env))
    assert torch.isfinite(ov).all()


def test_streamed_mode_prefetch_oom_is_transport(sampler_env, monkeypatch):
    """In the streamed modes the stages report their own phase; the prefetch between blocks is not a stage."""
    _prefetch_fails(monkeypatch)
    with pytest.raises(LongMediaOOM) as info:
        run_longmedia(sampler_env,
                      PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64),
                      *sampler_job(sampler_env))
    assert info.value.report.phase == "prefetch_transport"


def test_a_latent_with_nan_is_reported_first_with_what_to_try(sampler_env, monkeypatch, caplog):
    from longmedia.execution import streamed_block

    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                          mlp_chunk_tokens=96)
    _, _, clean = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert clean.report.output_finite and not any("NaN" in line for line in clean.report.summary_lines())
    real = streamed_block._Run.streamed_mlp

    def poisoned(self):  # a stage that leaves NaN in the packed sequence, as the 50-block run on the H200 did before the
        # offload-stream fix (727d794)
        real(self)
        self.x[5, 3] = float("nan")

    monkeypatch.setattr(streamed_block._Run, "streamed_mlp", poisoned)
    (ov, _), _, bad = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert not torch.isfinite(ov).all()
    assert bad.report.output_finite is False and json.loads(bad.report.to_json())["output_finite"] is False
    first = bad.report.summary_lines()[0]
    assert first.startswith("WARNING: the sampled latent holds NaN or inf") and "memory_mode normal" in first
    assert any("holds NaN or inf" in r.getMessage() for r in caplog.records)


def test_longmedia_probes_names_the_first_non_finite_phase_in_the_report(sampler_env, monkeypatch, caplog):
    """A user's NaN report: LONGMEDIA_PROBES=nan,weights switches the product's probes on for the run; the report
    (and the log, as it happens) names the first stage whose packed sequence held NaN and where the weights came from."""
    from longmedia.execution import streamed_block

    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                          mlp_chunk_tokens=96)
    monkeypatch.delenv("LONGMEDIA_PROBES", raising=False)
    assert run_longmedia(sampler_env, request, *sampler_job(sampler_env))[2].report.probes is None  # none by default
    monkeypatch.setenv("LONGMEDIA_PROBES", "nan,weights")
    clean = run_longmedia(sampler_env, request, *sampler_job(sampler_env))[2].report.probes.lines
    assert clean[0].endswith("non-finite seen: False") and clean[1].startswith("WEIGHT PROBE: {'resident': ")
    real = streamed_block._Run.streamed_mlp

    def poisoned(self):
        real(self)
        self.x[7, 1] = float("nan")

    monkeypatch.setattr(streamed_block._Run, "streamed_mlp", poisoned)
    (ov, _), _, bad = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    first = "NAN PROBE: phase streamed_mlp call 2: input finite True, output finite False"
    assert not torch.isfinite(ov).all() and bad.report.probes.lines[0].startswith(first)
    assert any(line.startswith(first) for line in bad.report.summary_lines())
    assert json.loads(bad.report.to_json())["probes"]["lines"][0].startswith(first)
    assert any(first in r.getMessage() for r in caplog.records)


def test_all_finite_reads_each_part_of_a_nested_latent(sampler_env):
    from comfy.nested_tensor import NestedTensor  # what H3's empty AV latent holds (video 5-D, audio 3-D)

    from longmedia.comfy.passes.sampler import all_finite

    video, audio = torch.randn(1, 4, 3, 2, 2), torch.randn(1, 8, 5)
    assert all_finite(NestedTensor([video, audio])) and all_finite(video)
    audio[0, 2, 1] = float("inf")
    assert not all_finite(NestedTensor([video, audio])) and not all_finite(audio)
