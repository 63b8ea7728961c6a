"""Backend registry, the dispatcher's resolution table and building AttentionFns (the ComfyUI override:
test_override_fake_comfy.py)."""

import importlib.util

import pytest
import torch
from attention_fakes import ALL, fake_registry, fake_spec, rand_qkv  # tests/core helper

from longmedia.attention import backends as builtin
from longmedia.attention.choice import build_attention_fn
from longmedia.attention.dispatcher import (
    AttentionModeError,
    existing_backend_is_exact,
    resolve_attention,
)
from longmedia.attention.protocol import sdpa_attention
from longmedia.attention.registry import (
    BackendRegistry,
    BackendSpec,
    BackendUnavailableError,
    BuildContext,
    UnknownBackendError,
)
from longmedia.attention.schedule import SolSettings, SolSettingsError
from longmedia.kernels import sol_reference

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes

GIB = 2**30
H3 = dict(heads=56, head_dim=128, dtype=torch.bfloat16)
TABLE = ((0, 300, "text"), (300, 700, "ref_img"), (700, 1100, "audio"), (1100, 20000, "video"))


# ---- the resolution table ---------------------------------------------------------------------
# 100k tokens, 56 heads x 128, bf16: one fused call 5.34 GiB (K/V 2.67 GiB); streamed K/V 2.67 GiB + 28 KiB
# per query row; int8 K/V 1.38 GiB + 28 KiB per row.

S = 100_000
CASES = [
    # mode, capability, budget GiB, unavailable, seq_len -> backend, exact_backend, chunk, fits, reason fragment
    ("auto", (9, 0), None, (), S, "sdpa_cudnn", "sdpa_cudnn", 0, True, "fastest exact backend"),
    ("auto", (9, 0), 6, (), S, "sdpa_cudnn", "sdpa_cudnn", 0, True, "whole sequence"),
    ("auto", (9, 0), 4, (), S, "sdpa_cudnn", "sdpa_cudnn", 16384, True, "query chunks of <= 16384"),
    ("auto", (9, 0), 2.9, (), S, "sdpa_cudnn", "sdpa_cudnn", 8192, True, "query chunks of <= 8192"),
    ("auto", (9, 0), 2, (), S, "qstream_triton_int8", "qstream_triton_int8", 16384, True, "exact over int8 K/V"),
    ("auto", (9, 0), 1, (), S, "qstream_triton_int8", "qstream_triton_int8", 0, False, "no exact path fits"),
    ("auto", (9, 0), None, ("sdpa_cudnn",), S, "sdpa_flash", "sdpa_flash", 0, True, "sdpa_cudnn (not available"),
    ("auto", (8, 9), None, (), S, "sdpa_flash", "sdpa_flash", 0, True, "needs compute capability >= 9.0"),
    ("auto", (8, 0), None, ("sdpa_flash",), S, "qstream_triton", "qstream_triton", 0, True, "fastest exact"),
    ("auto", (7, 5), None, (), S, "sdpa_efficient", "sdpa_efficient", 0, True, "fastest exact"),
    ("auto", None, None, (), S, "sdpa", "sdpa", 0, True, "needs a CUDA device"),
    ("auto", None, 4, (), 4000, "sdpa", "sdpa", 0, True, "fastest exact"),
    ("existing", (9, 0), None, (), S, "existing", "existing", 0, True, "never swapped"),
    ("existing", (9, 0), 4, (), S, "existing", "existing", 16384, True, "never swapped"),
    ("sol", (9, 0), None, (), S, "sol", "sdpa_cudnn", 0, True, "fixed tau=1.3"),
    ("sol", None, None, (), S, "sol_reference", "sdpa", 0, True, "sol (needs a CUDA device)"),
    ("sol", (9, 0), None, (), 8000, "sdpa_cudnn", "sdpa_cudnn", 0, True, "< sol_min_tokens 16384"),
    ("sol", (9, 0), 4, (), S, "sol", "sdpa_cudnn", 16384, True, "exact phases run sdpa_cudnn"),
    ("scheduled_sol", (9, 0), None, (), S, "sol", "sdpa_cudnn", 0, True, "tau 1.3 -> 0.8"),
    ("scheduled_sol", (9, 0), None, ("sol", "sol_reference", "kitchen_sol"), S, "sdpa_cudnn", "sdpa_cudnn", 0, True,
     "no Sol backend usable"),
    ("scheduled_sol", (9, 0), None, ("sol",), S, "kitchen_sol", "sdpa_cudnn", 0, True, "passed over sol (not avail"),
]


def test_int8_kv_backends_are_passed_over_when_the_caller_holds_float_kv():
    """At a 2 GiB budget only exact-over-int8 fits; a caller that keeps K/V in bf16 (the streamed executor)
    would hold bf16 K/V and an int8 copy on top, so auto does not claim that path fits: nothing fits (Sol
    holds bf16 K/V too), and the plan says so instead of promising a saving it would not get."""
    kw = dict(seq_len=S, **H3, device_capability=(9, 0), budget_bytes_for_attention=2 * GIB, available=ALL)
    assert resolve_attention("auto", **kw).backend == "qstream_triton_int8"
    choice = resolve_attention("auto", **kw, int8_kv_storage=False)
    assert (choice.backend, choice.quantized_kv, choice.fits) == ("sdpa_cudnn", False, False), choice.reason
    assert "no exact path fits" in choice.reason and "over budget" in choice.reason
    at4 = resolve_attention("auto", **dict(kw, budget_bytes_for_attention=4 * GIB), int8_kv_storage=False)
    assert (at4.backend, at4.query_chunk_tokens) == ("sdpa_cudnn", 16384)  # bf16 K/V fit: unchanged
    exact = resolve_attention("auto", **dict(kw, budget_bytes_for_attention=None), int8_kv_storage=False)
    assert exact.backend == "sdpa_cudnn"  # nothing else changes when bf16 K/V fit


@pytest.mark.parametrize("mode, cap, budget, unavailable, seq, backend, exact_backend, chunk, fits, fragment", CASES)
def test_resolution_table(mode, cap, budget, unavailable, seq, backend, exact_backend, chunk, fits, fragment):
    choice = resolve_attention(mode, seq_len=seq, **H3, device_capability=cap,
                               budget_bytes_for_attention=None if budget is None else int(budget * GIB),
                               available=ALL - set(unavailable))
    assert (choice.backend, choice.exact_backend, choice.query_chunk_tokens, choice.fits) == \
        (backend, exact_backend, chunk, fits), choice.reason
    assert fragment in choice.reason
    assert choice.exact == (choice.sol is None)
    assert choice.uses_sol == (backend in ("sol", "sol_reference", "kitchen_sol"))
    if budget is not None and fits:
        assert choice.working_bytes <= budget * GIB


def test_auto_takes_sol_only_when_no_exact_path_fits():
    registry = builtin.default_registry().replace("sol", kv_element_bytes=1, kv_scale_bytes=4)  # an int8-K/V Sol
    avail = ALL - {"qstream_triton_int8", "qstream_reference"}
    choice = resolve_attention("auto", seq_len=S, **H3, device_capability=(9, 0), budget_bytes_for_attention=2 * GIB,
                               available=avail, registry=registry)
    assert (choice.backend, choice.exact, choice.fits) == ("sol", False, True)
    assert "no exact path fits the budget" in choice.reason and "the most exact" in choice.reason
    assert choice.tau_at(0.0, S) == choice.tau_at(1.0, S) == 0.8  # fixed tau, no dense phase
    assert choice.tau_at(0.5, 300) is None  # a short call (the text refiner) still runs exact
    roomy = resolve_attention("auto", seq_len=S, **H3, device_capability=(9, 0), budget_bytes_for_attention=8 * GIB,
                              available=avail, registry=registry)
    assert roomy.exact and roomy.backend == "sdpa_cudnn"


def test_existing_exactness_follows_the_installed_backend():
    for name, exact in (("attention_pytorch", True), ("attention_sage", False), ("attention3_sage", False),
                        ("attention_comfy_kitchen_int8", False), ("attention_flash", True), (None, True)):
        assert existing_backend_is_exact(name) is exact
        choice = resolve_attention("existing", seq_len=S, **H3, device_capability=(9, 0), available=ALL,
                                   existing_name=name)
        assert choice.exact is exact and (exact or "not exact" in choice.reason)


def test_choice_tau_at():
    kw = dict(seq_len=S, **H3, device_capability=(9, 0), available=ALL)
    sol = resolve_attention("sol", **kw)
    assert sol.tau_at(0.0, S) == sol.tau_at(None, S) == 1.3
    assert sol.tau_at(0.5, 300) is None  # a 300-token call (the text refiner) runs exact
    sched = resolve_attention("scheduled_sol", sol_settings=SolSettings(curve="linear", dense_percent=0.5), **kw)
    assert sched.tau_at(0.25, S) is None and sched.tau_at(0.5, S) == 1.3 and sched.tau_at(1.0, S) == 0.8
    assert resolve_attention("auto", **kw).tau_at(0.9, S) is None


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(mode="fast"), "attention_mode"),
    (dict(seq_len=0), "seq_len"),
    (dict(heads=True), "heads"),
    (dict(dtype="bf16"), "dtype"),
    (dict(device_capability=(9,)), "device_capability"),
    (dict(budget_bytes_for_attention=-1), "budget_bytes_for_attention"),
    (dict(budget_bytes_for_attention=1.5), "budget_bytes_for_attention"),
])
def test_resolve_validation(kwargs, fragment):
    args = dict(mode="auto", seq_len=S, **H3, device_capability=(9, 0), available=ALL) | kwargs
    with pytest.raises(AttentionModeError) as info:
        resolve_attention(args.pop("mode"), **args)
    assert fragment in str(info.value) and isinstance(info.value, ValueError)


def test_resolve_rejects_foreign_settings_and_impossible_inputs():
    with pytest.raises(SolSettingsError, match="SolSettings"):
        resolve_attention("sol", seq_len=S, **H3, device_capability=(9, 0), available=ALL, sol_settings={"tau": 1})
    with pytest.raises(BackendUnavailableError, match="no exact attention backend"):
        resolve_attention("auto", seq_len=S, heads=4, head_dim=64, dtype=torch.float64, device_capability=None,
                          available=ALL)


# ---- registry and declarations ----------------------------------------------------------------

def test_registry_is_immutable_and_explains_itself():
    log = []
    reg = fake_registry(log)
    assert reg.names == ("exact_fake", "sol_fake") and "sol_fake" in reg
    with pytest.raises(UnknownBackendError, match="known: exact_fake, sol_fake"):
        reg.get("flash")
    with pytest.raises(ValueError, match="unique"):
        BackendRegistry((fake_spec("a", log), fake_spec("a", log)))
    swapped = reg.with_backends(fake_spec("exact_fake", log, rank=9), fake_spec("new", log))
    assert swapped.names == ("exact_fake", "sol_fake", "new") and swapped.get("exact_fake").speed_rank == 9
    assert reg.get("exact_fake").speed_rank == 0  # the original is untouched
    assert reg.without("sol_fake").names == ("exact_fake",)
    broken = reg.replace("exact_fake", availability=lambda: (False, "kernel missing"))
    assert [(p.name, p.available) for p in broken.check_availability()] == [("exact_fake", False), ("sol_fake", True)]
    with pytest.raises(BackendUnavailableError, match="kernel missing"):
        broken.build("exact_fake")


def test_supports_reasons():
    spec = builtin.default_registry().get("sdpa_cudnn")
    ok = dict(dtype=torch.bfloat16, head_dim=128, seq_len=S, device_capability=(9, 0))
    assert spec.supports(**ok) == (True, "supported")
    for change, fragment in ((dict(dtype=torch.float32), "float32"), (dict(head_dim=48), "head_dim"),
                             (dict(device_capability=None), "CUDA"), (dict(device_capability=(8, 6)), "8.6")):
        good, why = spec.supports(**(ok | change))
        assert not good and fragment in why
    limited = fake_spec("short", [], max_tokens=1000)
    assert "at most 1000" in limited.supports(dtype=torch.float32, head_dim=8, seq_len=1001, device_capability=None)[1]


def test_memory_declarations():
    reg = builtin.default_registry()
    bf16, int8, math_ = reg.get("sdpa_flash"), reg.get("qstream_triton_int8"), reg.get("sdpa_math")
    assert bf16.kv_bytes_per_token_head(128, 2) == 512 and int8.kv_bytes_per_token_head(128, 2) == 264
    assert int8.quantized_kv and not bf16.quantized_kv
    w = dict(seq_len=1000, heads=2, head_dim=64, dtype_bytes=2, query_rows=100)
    assert bf16.working_bytes(**w) == 1000 * 2 * 256 + 2 * 100 * 2 * 64 * 2
    assert math_.working_bytes(**w) == bf16.working_bytes(**w) + 2 * 100 * 1000 * 8
    assert bf16.extra_bytes(**w) == 0 and math_.extra_bytes(**w) == 2 * 100 * 1000 * 8
    sol = reg.get("sol")  # key summaries, block lists, routing mask, proxies: the kernel's own count
    workspace = sol_reference.sol_workspace_bytes(heads=2, rows=100, seq_len=1000, head_dim=64, elem_bytes=2)
    assert sol.extra_bytes(**w) == workspace > 2 * 16 * 64 * 2 * 2  # more than the bf16 summaries alone
    assert sol.working_bytes(**w) == bf16.working_bytes(**w) + workspace
    assert bf16.working_bytes(**(w | dict(query_rows=5000))) == bf16.working_bytes(**(w | dict(query_rows=1000)))


# ---- building AttentionFns ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sdpa", "sdpa_math"])
def test_cpu_sdpa_backends_match_the_contract(name):
    q, k, v = rand_qkv(1)
    out = builtin.default_registry().build(name)(q, k, v, q_offset=64)
    assert out.shape == (1, 96, 4 * 32)
    torch.testing.assert_close(out, sdpa_attention(q, k, v), rtol=1e-5, atol=1e-5)
    scaled = builtin.default_registry().build(name, BuildContext(sm_scale=0.05))(q, k, v, q_offset=0)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.05)
    torch.testing.assert_close(scaled, builtin.merge_heads(ref), rtol=1e-5, atol=1e-5)


def test_pinned_sdpa_falls_back_loudly_when_the_kernel_refuses():
    (result,) = builtin.default_registry().check_availability(["sdpa_cudnn"])
    available, why = result.available, result.reason
    if not available:  # CPU-only torch builds (CI's) have no cuDNN backend to pin at all
        pytest.skip(f"sdpa_cudnn unavailable in this torch build: {why}")
    q, k, v = rand_qkv(13)  # CPU tensors: the cuDNN kernel takes none
    with pytest.warns(builtin.SdpaFallbackWarning, match="CUDNN_ATTENTION"):
        out = builtin.default_registry().build("sdpa_cudnn")(q, k, v, q_offset=0)
    torch.testing.assert_close(out, sdpa_attention(q, k, v), rtol=1e-5, atol=1e-5)


needs_refs = pytest.mark.skipif(importlib.util.find_spec("longmedia.kernels.qstream_reference") is None,
                                reason="longmedia.kernels references are not installed")


@needs_refs
def test_reference_backends_exact_and_dense_sol():
    q, k, v = rand_qkv(2)
    reg, ref = builtin.default_registry(), sdpa_attention(q, k, v)
    torch.testing.assert_close(reg.build("qstream_reference")(q, k, v, q_offset=0), ref, rtol=1e-5, atol=1e-5)
    dense = reg.build("sol_reference", BuildContext(tau=-100.0, sink_ranges=((0, 64),)))(q, k, v, q_offset=0)
    torch.testing.assert_close(dense, ref, rtol=1e-5, atol=1e-5)


@needs_refs
def test_int8_factory_quantises_or_takes_prequantised_kv():
    spec = BackendSpec(name="int8_ref", exact=True, dtypes=builtin.FLOATS, cpu=True, kv_element_bytes=1,
                       factory=builtin._qstream_factory("qstream_reference", builtin.QSTREAM_REF, int8=True))
    from longmedia.kernels.int8_kv import quantize_kv_int8
    q, k, v = rand_qkv(3)
    fn = BackendRegistry((spec,)).build("int8_ref")
    out, ref = fn(q, k, v, q_offset=0), sdpa_attention(q, k, v)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-2
    (k8, ks), (v8, vs) = quantize_kv_int8(k), quantize_kv_int8(v)
    assert torch.equal(fn(q, k8, v8, q_offset=0, k_scale=ks, v_scale=vs), out)
    with pytest.raises(BackendUnavailableError, match="k_scale"):
        fn(q, k8, v8, q_offset=0)


@torch.inference_mode(False)  # normal tensors (outside ComfyUI): their version counters are checked
def test_sol_summary_memo_never_serves_stale_kv():
    memo, made = builtin._SummaryMemo(), []
    k, v = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)

    def make():
        made.append(1)
        return len(made)
    assert memo.get(k, v, torch.float32, make) == memo.get(k, v, torch.float32, make) == 1
    k.mul_(2.0)  # modified in place: its version moves
    assert memo.get(k, v, torch.float32, make) == 2
    assert memo.get(k.clone(), v, torch.float32, make) == 3  # another tensor with equal values
    assert memo.get(k, v, torch.float16, make) == 4


def test_sol_summary_memo_under_inference_mode():
    """ComfyUI runs every node inside torch.inference_mode(): inference tensors have no version counter
    (`k._version` raises). The memo still works there: a new view of the same K/V buffer (what the executor
    hands in per query chunk) hits, the next head group's buffer (even at the old address) misses."""
    memo, made = builtin._SummaryMemo(), []

    def make():
        made.append(1)
        return len(made)

    with torch.inference_mode():
        k_buf, v_buf = torch.randn(8, 8), torch.randn(8, 8)
        assert k_buf.is_inference()

        def views(k_buf, v_buf):
            return (b.view(1, 8, 2, 4)[0].transpose(0, 1).unsqueeze(0) for b in (k_buf, v_buf))
        assert memo.get(*views(k_buf, v_buf), torch.float32, make) == 1
        assert memo.get(*views(k_buf, v_buf), torch.float32, make) == 1   # new views, same buffers: hit
        del k_buf, v_buf
        k_buf, v_buf = torch.randn(8, 8), torch.randn(8, 8)               # the next group's buffers
        assert memo.get(*views(k_buf, v_buf), torch.float32, make) == 2
        k2, v2 = views(k_buf, v_buf)
        assert memo.get(k2[:, :, :4], v2[:, :, :4], torch.float32, make) == 3  # another layout of the storage
    with torch.inference_mode(False):  # normal tensors keep the version check
        plain_k, plain_v = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
        assert memo.get(plain_k, plain_v, torch.float32, make) == 4
        plain_k.add_(1.0)
        assert memo.get(plain_k, plain_v, torch.float32, make) == 5


@needs_refs
def test_sol_reference_backend_under_inference_mode(monkeypatch):
    """The reference Sol backend goes through the same summary memo: per query chunk, one summary, equal to
    one reference call over the whole query, inside torch.inference_mode() as ComfyUI runs it."""
    made = []
    real = sol_reference.sol_key_summaries
    monkeypatch.setattr(sol_reference, "sol_key_summaries", lambda *a, **kw: made.append(1) or real(*a, **kw))
    with torch.inference_mode():
        q, k, v = rand_qkv(13, heads=2, rows=200, seq=200, dim=32)
        fn = builtin.default_registry().build("sol_reference", BuildContext(tau=0.5, sink_ranges=((0, 40),)))
        out = torch.cat([fn(q[:, :, a:a + 64], k, v, q_offset=a) for a in range(0, 200, 64)], dim=1)
        assert len(made) == 1
        ref = builtin.merge_heads(sol_reference.sol_attention(q, k, v, tau=0.5, sink_ranges=((0, 40),)))
    assert out.is_inference()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


needs_sol_kernel = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("longmedia.kernels.sol_attention") is None,
    reason="triton or longmedia.kernels.sol_attention is not installed")


@needs_sol_kernel
@pytest.mark.parametrize("inference", [False, True], ids=["grad_mode", "inference_mode"])
def test_sol_kernel_backend_per_query_chunk_matches_reference(monkeypatch, inference):
    """Under the Triton interpreter: 64-row query chunks share one key summary and equal one reference call.
    inference_mode is the regression of issue 14: the Sol kernel backend under torch.inference_mode() (how
    ComfyUI runs every node) raised "Inference tensors do not track version counter" from its summary memo."""
    import contextlib

    import longmedia.kernels.sol_attention as kernel
    from longmedia.kernels.sol_reference import sol_attention as reference
    made = []
    real = kernel.sol_key_summaries
    monkeypatch.setattr(kernel, "sol_key_summaries", lambda *a, **kw: made.append(1) or real(*a, **kw))
    with torch.inference_mode() if inference else contextlib.nullcontext():
        q, k, v = rand_qkv(14 if inference else 11, heads=2, rows=200, seq=200, dim=64)
        fn = builtin.default_registry().build("sol", BuildContext(tau=0.5, sink_ranges=((0, 40),)))
        out = torch.cat([fn(q[:, :, a:a + 64], k, v, q_offset=a) for a in range(0, 200, 64)], dim=1)
        ref = builtin.merge_heads(reference(q, k, v, tau=0.5, sink_ranges=((0, 40),)))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert len(made) == 1


@needs_sol_kernel
def test_exact_kernel_backends_under_the_interpreter():
    q, k, v = rand_qkv(12, heads=2, rows=64, seq=150, dim=64, dtype=torch.float16)
    reg, ref = builtin.default_registry(), sdpa_attention(q.float(), k.float(), v.float())
    exact = reg.build("qstream_triton")(q, k, v, q_offset=0)
    assert exact.dtype == torch.float16 and exact.shape == (1, 64, 128)
    torch.testing.assert_close(exact.float(), ref, rtol=2e-3, atol=2e-3)
    int8 = reg.build("qstream_triton_int8")(q, k, v, q_offset=0).float()
    assert ((int8 - ref).norm() / ref.norm()).item() < 1e-2


def test_build_follows_the_schedule_and_the_sink_mode():
    log = []
    reg = fake_registry(log)
    kw = dict(seq_len=20000, heads=4, head_dim=32, dtype=torch.float32, device_capability=None, registry=reg)
    q, k, v = rand_qkv(4)
    for sink, keys, rows in (("exact_kv", ((0, 1100),), ()), ("exact_kv_and_rows", ((0, 1100),), ((0, 1100),)),
                             ("off", (), ())):
        choice = resolve_attention("scheduled_sol", sol_settings=SolSettings(sink_conditioning=sink), **kw)
        assert choice.backend == "sol_fake" and choice.exact_backend == "exact_fake"
        log.clear()
        build_attention_fn(choice, progress=0.1, row_spans=TABLE, registry=reg)(q, k, v, q_offset=0)
        build_attention_fn(choice, progress=0.6, row_spans=TABLE, registry=reg)(q, k, v, q_offset=128)
        build_attention_fn(choice, progress=0.6, row_spans=TABLE, registry=reg, force_exact=True)(q, k, v, q_offset=0)
        (n0, c0, _), (n1, c1, off1), (n2, _, _) = log
        assert (n0, n1, n2) == ("exact_fake", "sol_fake", "exact_fake") and c0.tau is None and off1 == 128
        assert c1.tau == pytest.approx(SolSettings().tau_start + (0.8 - 1.3) * 0.5 * (1 - torch.cos(
            torch.tensor(torch.pi * 0.5)).item()))
        assert (c1.sink_ranges, c1.exact_query_ranges) == (keys, rows)
    choice = resolve_attention("sol", **kw)
    with pytest.raises(SolSettingsError, match="row-span table"):
        build_attention_fn(choice, registry=reg)


def test_build_existing_needs_the_comfy_fn():
    choice = resolve_attention("existing", seq_len=S, **H3, device_capability=(9, 0), available=ALL)
    with pytest.raises(BackendUnavailableError, match="existing_attention_fn") as info:
        build_attention_fn(choice)
    import importlib
    import re

    named = re.search(r"(longmedia(?:\.\w+)+)\.(\w+)\(", str(info.value))  # the path the message tells the user
    assert callable(getattr(importlib.import_module(named.group(1)), named.group(2))), named.group(0)
    marker = object()
    assert build_attention_fn(choice, existing=marker) is marker
