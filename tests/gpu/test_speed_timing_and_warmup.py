"""On the GPU: the speed timing times the installed exact backends and auto follows it; the kernel warm-up compiles
Sol's variants for the planned shapes, and a tau change afterwards compiles nothing."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the GPU kernel tests need it")

from longmedia.attention import warmup  # noqa: E402
from longmedia.attention.backends import default_registry  # noqa: E402
from longmedia.attention.dispatcher import resolve_attention  # noqa: E402
from longmedia.attention.registry import BuildContext  # noqa: E402
from longmedia.attention.speed_timing import SpeedCache, time_speeds  # noqa: E402
from longmedia.kernels import sol_attention as sol_module  # noqa: E402

CUDA = torch.device("cuda")


def test_probe_times_exact_backends_and_auto_follows_it(tmp_path):
    reg, cache = default_registry(), SpeedCache(tmp_path)
    speeds = time_speeds(reg, cache, device=CUDA, head_dim=128, dtype=torch.bfloat16, seq_len=40000)
    print(speeds.summary())
    assert speeds.seconds and all(s > 0 for _, s in speeds.seconds) and not speeds.cached
    again = time_speeds(reg, cache, device=CUDA, head_dim=128, dtype=torch.bfloat16, seq_len=40000)
    assert again.cached and again.order == speeds.order
    choice = resolve_attention("auto", seq_len=40000, heads=56, head_dim=128, dtype=torch.bfloat16,
                               device_capability=torch.cuda.get_device_capability(CUDA), speeds=speeds)
    assert choice.backend == speeds.order[0] and "ordered by speed measured on" in choice.reason


def _compiled(kernel) -> int:
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        pytest.skip("this Triton keeps no JITFunction.device_caches to count compiled variants")
    return sum(len(entry[0]) for entry in caches.values())


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability(CUDA) < (9, 0),
                    reason="below sm90 Sol launches through triton.autotune (its own cache)")
def test_warm_up_compiles_the_planned_variants_and_tau_changes_compile_nothing():
    seq, chunk, heads, d = 20000, 8192, 56, 128
    got = warmup.warm_up(("sol",), default_registry(), seq_len=seq, query_chunk=chunk, heads=heads, group=0,
                         head_dim=d, dtype=torch.bfloat16, device=CUDA, capability=torch.cuda.get_device_capability(CUDA))
    assert [c[1:3] for c in got.calls] == [(0, chunk), (16384, seq - 16384)]
    before = _compiled(sol_module._sol_fwd)
    assert before >= 1
    build = default_registry()
    k = torch.randn(seq, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, seq, heads, d).transpose(1, 2)
    v = torch.randn(seq, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, seq, heads, d).transpose(1, 2)
    for tau in (0.8, 1.3, 1.05):  # the real head count (56: Triton specialises it like the warm-up's 8)
        fn = build.build("sol", BuildContext(tau=tau))
        for a, rows in warmup.query_calls(seq, chunk):
            q = torch.randn(rows, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, rows, heads, d).transpose(1, 2)
            fn(q, k, v, q_offset=a)
    torch.cuda.synchronize()
    assert _compiled(sol_module._sol_fwd) == before


def _flash4_compiled() -> int:
    from longmedia.attention.flash4 import import_module

    fwd = getattr(getattr(import_module(), "interface", None), "_flash_attn_fwd", None)
    cache = getattr(fwd, "compile_cache", None)
    cache = getattr(cache, "cache", cache)  # 4.0.0b40: a JITCache around the dict of compiled kernels
    if not hasattr(cache, "__len__"):
        pytest.skip("this flash-attn-4 keeps no _flash_attn_fwd.compile_cache to count compiled kernels")
    return len(cache)


def test_warm_up_compiles_flash4_for_the_planned_shapes_so_the_steps_compile_nothing():
    if "flash4" not in default_registry().available_names() or torch.cuda.get_device_capability(CUDA) < (9, 0):
        pytest.skip("flash-attn-4 is not installed here, or this card is below sm90 (tools/gpu/flash4.sh)")
    seq, chunk, heads, d = 30011, 12288, 56, 128  # a ragged last chunk: its own rows, as the executor launches
    got = warmup.warm_up(("sol", "flash4"), default_registry(), seq_len=seq, query_chunk=chunk, heads=heads, group=0,
                         head_dim=d, dtype=torch.bfloat16, device=CUDA, capability=torch.cuda.get_device_capability(CUDA),
                         free_bytes=int(torch.cuda.mem_get_info(CUDA)[0]))
    assert [c for c in got.calls if c[0] == "flash4"] == [("flash4", a, rows, seq, heads)
                                                          for a, rows in warmup.query_calls(seq, chunk)]
    before = _flash4_compiled()
    assert before >= 1
    fn = default_registry().build("flash4", BuildContext())
    k = torch.randn(seq, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, seq, heads, d).transpose(1, 2)
    v = torch.randn(seq, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, seq, heads, d).transpose(1, 2)
    for a, rows in warmup.query_calls(seq, chunk):
        q = torch.randn(rows, heads * d, device=CUDA, dtype=torch.bfloat16).view(1, rows, heads, d).transpose(1, 2)
        fn(q, k, v, q_offset=a)
    torch.cuda.synchronize()
    assert _flash4_compiled() == before
