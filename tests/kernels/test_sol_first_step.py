"""Sol's first step: tau is no kernel argument (changing it cannot recompile), and the warm-up before sampling
launches the planned call shapes once (attention/warmup.py), under TRITON_INTERPRET=1."""

from __future__ import annotations

import inspect

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: `pip install triton` to run the interpreter kernel tests")

from longmedia.attention import warmup  # noqa: E402
from longmedia.attention.backends import default_registry  # noqa: E402
from longmedia.kernels import sol_attention as sol_module  # noqa: E402

CONSTEXPRS = {"HEAD_DIM", "BLK", "QB", "GROUP", "KV_INT8", "IEEE", "WITH_STATS", "WHILE_LOOPS", "PAIR", "TMA"}


def _params(kernel) -> tuple[tuple[str, bool], ...]:
    """(name, is constexpr) of a kernel's parameters, read from its Python function (JITFunction, the interpreter's
    InterpretedFunction and an Autotuner all keep it as `.fn`)."""
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    return tuple((name, "constexpr" in str(p.annotation)) for name, p in inspect.signature(fn).parameters.items())


def test_tau_is_not_a_kernel_argument_so_it_cannot_be_a_constexpr():
    params = _params(sol_module._sol_fwd)
    assert {name for name, constexpr in params if constexpr} == CONSTEXPRS
    assert not any("tau" in name.lower() for name, _ in params)
    assert not any("tau" in name.lower() for name, _ in _params(sol_module._summaries_fwd))
    assert "tau" not in inspect.signature(sol_module._launch).parameters  # routing (torch) takes it, not the launch
    assert _params(sol_module._sol_fwd_tuned) == params  # the autotuned launch is the same kernel


def test_two_taus_launch_the_same_specialisation(fused_qkv, monkeypatch):
    seen = []
    launch = sol_module._launch

    def record(q, k, v, ks, vs, summ, mask, stats, out, lst, **kw):
        seen.append(kw | {"shapes": tuple(t.shape for t in (q, k, v)), "strides": tuple(t.stride() for t in (q, k, v)),
                          "mask_density": float(mask.float().mean())})
        return launch(q, k, v, ks, vs, summ, mask, stats, out, lst, **kw)
    monkeypatch.setattr(sol_module, "_launch", record)
    q, k, v = fused_qkv(300, 300, 2, 64, dtype=torch.float16)
    outs = [sol_module.sol_attention(q, k, v, tau=tau) for tau in (0.8, 1.3)]
    assert len(seen) == 2
    a, b = ({key: val for key, val in s.items() if key != "mask_density"} for s in seen)
    assert a == b  # every argument that could pick a compiled variant is the same
    assert seen[0]["mask_density"] > seen[1]["mask_density"]  # ... while tau did change the routing
    assert not torch.equal(outs[0], outs[1])


def test_call_shapes_cover_the_first_and_ragged_last_chunk_and_each_group():
    assert warmup.query_calls(109318, 16384) == ((0, 16384), (98304, 11014))
    assert warmup.query_calls(300, 0) == ((0, 300),) and warmup.query_calls(300, 512) == ((0, 300),)
    assert warmup.head_groups(56, 0) == (56,) and warmup.head_groups(56, 8) == (8,)
    assert warmup.head_groups(56, 12) == (12, 8)
    assert [warmup.specialisation_heads(h) for h in (1, 2, 8, 16, 48, 56, 17, 33)] == [1, 2, 8, 16, 16, 8, 17, 33]
    for heads in range(1, 80):  # every multiple of the head count is divisible by 16 exactly when the real one is
        h = warmup.specialisation_heads(heads)
        assert h <= max(heads, 17) and (h == 1) == (heads == 1)
        assert all((h * x % 16 == 0) == (heads * x % 16 == 0) for x in range(1, 64))


def test_warm_up_runs_the_planned_shapes_once(monkeypatch):
    calls = []
    reg = default_registry()
    spec = reg.get("sol")
    real = spec.factory

    def counting(ctx):
        fn = real(ctx)

        def wrapped(q, k, v, *, q_offset=0):
            calls.append((q_offset, q.shape[2], k.shape[2], q.shape[1], q.stride()))
            return fn(q, k, v, q_offset=q_offset)
        return wrapped
    reg = reg.replace("sol", factory=counting)
    got = warmup.warm_up(("sol", "sdpa_cudnn"), reg, seq_len=300, query_chunk=128, heads=56, group=0, head_dim=64,
                         dtype=torch.float16, device="cpu", capability=(9, 0), sync=lambda: None)
    assert [c[:4] for c in calls] == [(0, 128, 300, 8), (256, 44, 300, 8)]  # 56 heads warm as 8
    assert calls[0][4] == (8 * 64, 64, 8 * 64, 1)  # the executor's views of [rows, heads * head_dim] storage
    assert got.calls == (("sol", 0, 128, 300, 8), ("sol", 256, 44, 300, 8)) and got.seconds > 0
    assert "kernel warm-up before the first step" in got.lines()[0]
    assert warmup.warm_up(("sdpa_cudnn",), reg, seq_len=300, query_chunk=128, heads=56, group=0, head_dim=64,
                          dtype=torch.float16, device="cpu", capability=(9, 0)).calls == ()


def test_below_sm90_sol_autotunes_on_the_planned_heads_where_memory_allows():
    calls = []
    reg = default_registry().replace("sol", factory=lambda ctx: (lambda q, k, v, *, q_offset=0: calls.append(q.shape[1])))
    kw = dict(seq_len=300, query_chunk=0, heads=56, group=0, head_dim=64, dtype=torch.float16, device="cpu",
              capability=(8, 6), sync=lambda: None)
    assert warmup.warm_up(("sol",), reg, free_bytes=1 << 30, **kw).calls[0][4] == 56 and calls == [56]
    tight = warmup.warm_up(("sol",), reg, free_bytes=1 << 20, **kw)
    assert tight.calls[0][4] == 8 and "autotunes on 8 heads, not 56" in tight.note


def test_no_room_stops_the_warm_up_with_a_note_and_step_one_compiles_the_rest():
    def oom(ctx):
        def fn(q, k, v, *, q_offset=0):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return fn
    reg = default_registry().replace("sol", factory=oom)
    got = warmup.warm_up(("sol",), reg, seq_len=300, query_chunk=0, heads=56, group=0, head_dim=64,
                         dtype=torch.float16, device="cpu", capability=(9, 0), sync=lambda: None)
    assert got.calls == () and "stopped for want of memory (CUDA out of memory" in got.note


def INSTALLED():
    return True, "flash-attn-4 (stand-in)"


def test_flash4_warms_at_the_planned_heads_and_rows_beside_sol():
    seen = []

    def recording(name):
        return lambda ctx: (lambda q, k, v, *, q_offset=0: seen.append((name, q_offset, q.shape[2], k.shape[2],
                                                                        q.shape[1])))
    reg = default_registry().replace("flash4", factory=recording("flash4"), availability=INSTALLED)
    reg = reg.replace("sol", factory=recording("sol"))
    got = warmup.warm_up(("sol", "flash4"), reg, seq_len=300, query_chunk=128, heads=56, group=12, head_dim=64,
                         dtype=torch.bfloat16, device="cpu", capability=(9, 0), free_bytes=1 << 30, sync=lambda: None)
    flash = [c for c in seen if c[0] == "flash4"]  # each head group at its own heads: its config depends on them
    assert flash == [("flash4", a, rows, 300, h) for h in (12, 8) for a, rows in ((0, 128), (256, 44))]
    assert {c[4] for c in seen if c[0] == "sol"} == {12, 8}  # 12 and 8 heads specialise as themselves
    assert got.calls == tuple(seen) and got.note == ""


def test_flash4_is_left_to_step_one_where_its_planned_call_would_not_leave_half_the_memory():
    seen = []
    reg = default_registry().replace("flash4", factory=lambda ctx: (lambda q, k, v, *, q_offset=0: seen.append(1)),
                                     availability=INSTALLED)
    kw = dict(seq_len=300, query_chunk=0, heads=56, group=0, head_dim=64, dtype=torch.bfloat16, device="cpu",
              capability=(9, 0), sync=lambda: None)
    need = (2 * 300 + 2 * 300) * 56 * 64 * 2
    tight = warmup.warm_up(("flash4",), reg, free_bytes=2 * need, **kw)
    assert tight.calls == () and seen == [] and "flash4 not warmed" in tight.note and "step 1 compiles it" in tight.note
    assert warmup.warm_up(("flash4",), reg, free_bytes=2 * need + 2, **kw).calls == (("flash4", 0, 300, 300, 56),)
