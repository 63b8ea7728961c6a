"""flash-attn-4 declared as an exact backend (attention/flash4.py): its constraints, and the dispatcher's treatment
with the package absent and with a fake `flash_attn.cute` present (CPU, simulated compute capabilities)."""

from __future__ import annotations

import types

import pytest
import torch
from attention_fakes import rand_qkv

from longmedia.attention import flash4
from longmedia.attention.backends import default_registry
from longmedia.attention.dispatcher import resolve_attention
from longmedia.attention.registry import BackendUnavailableError, BuildContext
from longmedia.attention.speed_timing import SpeedCache, time_speeds
from longmedia.attention.speeds import MeasuredSpeeds, length_class

H100 = (9, 0)
SEQ = 109190


def _fake_cute(calls):
    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        assert q.dim() == 4 and q.shape[2] == k.shape[2] and q.stride(-1) == 1 and not causal  # [B, S, H, D]
        calls.append((tuple(q.shape), softmax_scale))
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                               v.transpose(1, 2), scale=softmax_scale)
        return out.transpose(1, 2).contiguous(), torch.zeros(q.shape[0], q.shape[2], q.shape[1])  # (out, lse)
    return types.SimpleNamespace(flash_attn_func=flash_attn_func)


def _with_fake(calls):
    return default_registry().with_backends(flash4.flash4_spec(find=lambda: True, module=lambda: _fake_cute(calls)))


def test_declaration_states_its_constraints_and_bytes():
    spec = default_registry().get("flash4")
    assert spec.exact and spec.dtypes == frozenset({torch.bfloat16, torch.float16}) and spec.head_dims == (64, 96, 128)
    assert spec.call_shape == "query_chunks" and spec.score_bytes == 0 and spec.workspace is None
    assert spec.min_capability == (9, 0) and spec.max_capability == (11, 9) and not spec.cpu
    assert "flash-attn-4" in spec.requires and "nvidia-cutlass-dsl" in spec.requires
    kw = dict(seq_len=SEQ, heads=56, head_dim=128, dtype_bytes=2)
    assert spec.extra_bytes(query_rows=16384, **kw) == 0
    assert spec.working_bytes(query_rows=16384, **kw) == SEQ * 56 * 512 + 2 * 16384 * 56 * 128 * 2
    for cap, ok, fragment in (((9, 0), True, ""), ((10, 0), True, ""), ((8, 9), False, ">= 9.0"),
                              ((12, 0), False, "up to compute capability 11.9")):
        got, why = spec.supports(dtype=torch.bfloat16, head_dim=128, seq_len=SEQ, device_capability=cap)
        assert got is ok and fragment in why
    assert not spec.supports(dtype=torch.float32, head_dim=128, seq_len=SEQ, device_capability=H100)[0]
    assert not spec.supports(dtype=torch.bfloat16, head_dim=256, seq_len=SEQ, device_capability=H100)[0]


def test_absent_package_is_unavailable_and_never_picked(monkeypatch):
    monkeypatch.setattr(flash4, "find_module", lambda: False)
    reg = default_registry().with_backends(flash4.flash4_spec(find=lambda: False))
    (result,) = reg.check_availability(["flash4"])
    assert not result.available and "flash-attn-4 is not installed" in result.reason
    with pytest.raises(BackendUnavailableError, match="flash-attn-4 is not installed"):
        reg.build("flash4")
    choice = resolve_attention("auto", seq_len=SEQ, heads=56, head_dim=128, dtype=torch.bfloat16,
                               device_capability=H100, registry=reg)
    assert choice.exact and choice.backend != "flash4"


def test_the_real_lookup_never_imports_the_cute_dsl():
    assert isinstance(flash4.find_module(), bool)  # absent here; the lookup itself must not raise


def test_fake_module_present_runs_exact_in_h3_layout():
    calls = []
    reg = _with_fake(calls)
    q, k, v = rand_qkv(seed=7, heads=4, rows=80, seq=144, dim=64, dtype=torch.bfloat16)
    fn = reg.build("flash4", BuildContext(sm_scale=0.11))
    out = fn(q, k, v, q_offset=64)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.11)
    assert out.shape == (1, 80, 4 * 64) and calls == [((1, 80, 4, 64), 0.11)]
    assert torch.allclose(out.float(), ref.transpose(1, 2).reshape(1, 80, 256), atol=2e-2)


def test_broken_install_is_a_named_unavailability():
    def broken():
        raise ImportError("No module named 'cutlass'")
    reg = default_registry().with_backends(flash4.flash4_spec(find=lambda: True, module=broken))
    with pytest.raises(BackendUnavailableError, match="not importable .*cutlass"):
        reg.build("flash4")


def test_dispatcher_picks_it_by_the_probe_and_by_capability():
    reg = _with_fake([])
    kw = dict(seq_len=SEQ, heads=56, head_dim=128, dtype=torch.bfloat16, registry=reg, available=reg.names)
    # static rank (no probe): declared first at rank 0, so auto takes it on Hopper
    assert resolve_attention("auto", device_capability=H100, **kw).backend == "flash4"
    # the probe measured cuDNN faster on this (simulated) device: auto follows the measurement
    slower = MeasuredSpeeds(device="sim H100", head_dim=128, dtype="bfloat16", length_class=length_class(SEQ),
                            rows=65536, heads=8, seconds=(("flash4", 0.6), ("sdpa_cudnn", 0.5)))
    choice = resolve_attention("auto", device_capability=H100, speeds=slower, **kw)
    assert choice.backend == "sdpa_cudnn" and "flash4 600 ms" in choice.reason
    faster = MeasuredSpeeds(device="sim H100", head_dim=128, dtype="bfloat16", length_class=length_class(SEQ),
                            rows=65536, heads=8, seconds=(("flash4", 0.48), ("sdpa_cudnn", 0.575)))
    assert resolve_attention("auto", device_capability=H100, speeds=faster, **kw).backend == "flash4"
    # Ampere / Ada and consumer Blackwell (sm120): not declared for them
    for cap in ((8, 6), (12, 0)):
        assert resolve_attention("auto", device_capability=cap, **kw).backend != "flash4"


def test_speed_timing_times_the_fake_on_a_simulated_hopper(tmp_path, monkeypatch):
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 128)
    calls = []
    reg = _with_fake(calls)
    timed = []

    def clock(name, call):
        call()
        timed.append(name)
        return {"flash4": 0.48}.get(name, 0.6)
    avail = {"flash4", "sdpa", "sdpa_math", "qstream_reference"}
    got = time_speeds(reg, SpeedCache(tmp_path), device="cpu", head_dim=128, dtype=torch.bfloat16, seq_len=SEQ,
                       timer=clock, label="sim H100", capability=H100, available=avail)
    assert "flash4" in timed and got.order[0] == "flash4" and calls
    assert dict(got.skipped)["sdpa_math"] == "materialises the scores"
