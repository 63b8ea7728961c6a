"""LongMedia's block replacement and BlockSparseAttention, in both install orders, normal and streamed modes.

BlockSparseAttention (BSA, ComfyUI 0.38+) replaces every `("double_block", i)` and, when a call is eligible
(CUDA, bf16, head_dim 128, kitchen's Sol: never on this CPU), hands the block its own attention in
`call_args["attention"]`: `attention(h, rope_freqs=None, transformer_options={})`, the whole attention phase.
Here that contract is tested with a stand-in of BSA's shape (`bsa_like_patch`: it chains `previous` as the
chaining line cf3103c5 does, and hands an attention with BSA's signature), and with the real node in both install
orders (on the CPU it only chains `previous`). The real sparse path on a GPU: tests/gpu/test_block_sparse_gpu.py.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.errors import LongMediaInputError
from longmedia.execution.chunks import ChunkSizes
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS

SCOPE_KEY = "_block_sparse_attention_h3_block_v1"  # what the chaining BSA sets around each block call
STREAMED = dict(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64, mlp_chunk_tokens=96)


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs

    return {"plain": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"])), "ncs": ncs}


def bsa_module():
    try:
        return importlib.import_module("comfy_extras.nodes_sparse_attention")
    except ImportError:
        pytest.skip("this ComfyUI lacks the feature: BlockSparseAttention (comfy_extras.nodes_sparse_attention)")


def chaining_bsa():
    bsa = bsa_module()
    if "previous" not in inspect.signature(bsa.make_h3_block_patch).parameters:
        pytest.skip("this ComfyUI lacks the feature: BlockSparseAttention chaining an existing double_block "
                    "replacement (make_h3_block_patch(..., previous), upstream cf3103c5)")
    return bsa


def block_takes_attention():
    import comfy.ldm.minimax.model as h3

    if "attention" not in inspect.signature(h3.DiTBlock.forward).parameters:
        pytest.skip("this ComfyUI lacks the feature: a DiT block run with call_args['attention'] "
                    "(DiTBlock.forward(..., attention=None), ComfyUI 0.38+)")


def job(patcher, seed=3):
    return tiny_sampler_job(patcher, seed=seed)


def stock(env, patcher, seed=3):
    return env["ncs"].SamplerCustomAdvanced.execute(*job(patcher, seed)).result[0]["samples"].unbind()


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


class Log:
    """What the stand-in saw: block calls, attention calls and the transformer_options our block got."""

    def __init__(self):
        self.blocks: list[int] = []
        self.attention: list[int] = []
        self.scopes: list[object] = []


def bsa_like_patch(block, index, log: Log, *, hand: bool, previous=None):
    """A block replacement with BSA's shape: chains `previous` (else calls the original block) and, when `hand`,
    passes its own attention in call_args["attention"] with BSA's signature. Its attention computes what the
    stock block's would (block.attn), so a run that honours it equals a stock run."""

    def attention(h, rope_freqs=None, transformer_options=None):  # BSA's signature (its default is a shared {})
        log.attention.append(index)
        return block.attn(h, rope_freqs=rope_freqs, transformer_options=transformer_options or {})

    def block_patch(args, extra):
        log.blocks.append(index)
        call_args = {**args, "attention": attention} if hand else args
        if previous is None:
            return extra["original_block"](call_args)
        return previous(call_args, extra)

    return block_patch


def with_patches(patcher, make):
    """A clone of `patcher` with make(block, i, previous) on every double block, chaining what was there (as BSA's
    chaining line does)."""
    m = patcher.clone()
    blocks = m.get_model_object("diffusion_model").blocks
    existing = dict(m.model_options.get("transformer_options", {}).get("patches_replace", {}).get("dit", {}))
    for i, block in enumerate(blocks):
        m.set_model_patch_replace(make(block, i, existing.get(("double_block", i))), "dit", "double_block", i)
    return m


def ours(log: Log | None = None, memory_mode="low_vram"):
    """make() installing LongMedia's streamed replacement (existing attention), recording its calls in `log`."""
    from longmedia.comfy.patching.attention_override import existing_attention_fn
    from longmedia.comfy.patching.block_patch import streamed_replacement

    def factory(topts, heads):
        if log is not None:
            log.scopes.append(topts.get(SCOPE_KEY))
        return existing_attention_fn(topts, heads)

    def make(block, i, previous):
        on_block = (lambda index, when: log.blocks.append(-1 - index) if when == "start" else None) if log else None
        return streamed_replacement(block, i, ChunkSizes(64, 0, 96), factory, previous=previous,
                                    memory_mode=memory_mode, on_block=on_block)
    return make


N = TINY_DIMS.num_blocks


# --- the contract with a stand-in of BSA's shape (every tree) -------------------------------------------------

def test_after_bsa_streamed_runs_its_patch_first_and_refuses_its_attention_by_name(env):
    """LongMedia installed after a BSA-shaped patch that hands its attention: the Sampler keeps that patch as
    `previous` (it runs first) and refuses the handed attention by name, naming the memory_mode to use."""
    from longmedia.comfy.passes.sampler import run_sampler

    log = Log()
    patched = with_patches(env["plain"], lambda b, i, prev: bsa_like_patch(b, i, log, hand=True, previous=prev))
    with torch.inference_mode(), pytest.raises(LongMediaInputError) as info:
        run_sampler(*job(patched), PlanRequest(**STREAMED))
    message = str(info.value)
    assert "BlockSparseAttention" in message and "memory_mode=normal" in message and "memory_mode=low_vram" in message
    assert "DiT block 0" in message and log.blocks[:1] == [0] and log.attention == []


def test_after_a_patch_that_hands_nothing_streamed_chains_it_every_block_and_step(env):
    """BSA on a CPU (or outside its sigma window) hands nothing: its patch still runs first, ours streams."""
    from longmedia.comfy.passes.sampler import run_sampler

    log = Log()
    patched = with_patches(env["plain"], lambda b, i, prev: bsa_like_patch(b, i, log, hand=False, previous=prev))
    sv, sa = stock(env, env["plain"])
    with torch.inference_mode():
        result = run_sampler(*job(patched), PlanRequest(**STREAMED))
    ov, oa = result.output["samples"].unbind()
    assert result.report.streamed_blocks == tuple(range(N))
    calls = len(log.blocks)
    assert calls >= 2 * N and log.blocks[:N] == list(range(N))
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5 and sv.std() > 0.05
    assert any(f"{N} double-block replacement(s) another node installed chained" in n for n in result.report.notes)


def test_normal_mode_calls_the_handed_attention_and_equals_stock_bit_for_bit(env):
    """Normal mode installs no block replacement: the BSA-shaped patch's attention runs as installed."""
    from longmedia.comfy.passes.sampler import run_sampler

    block_takes_attention()
    log = Log()
    patched = with_patches(env["plain"], lambda b, i, prev: bsa_like_patch(b, i, log, hand=True, previous=prev))
    with torch.inference_mode():
        sv, sa = stock(env, patched)
        stock_calls = len(log.attention)
        result = run_sampler(*job(patched), PlanRequest(memory_mode="normal", attention_mode="existing"))
    ov, oa = result.output["samples"].unbind()
    assert stock_calls >= 2 * N and len(log.attention) == 2 * stock_calls  # called, not replaced
    assert torch.equal(ov, sv) and torch.equal(oa, sa) and result.report.streamed_blocks == ()


def test_before_bsa_a_handed_attention_reaches_our_block_and_is_refused_by_name(env):
    """LongMedia's replacement installed first; a BSA-shaped patch chains it as `previous` and passes its attention
    in call_args: ours uses it (here: refuses by name) instead of dropping it."""
    from longmedia.comfy.patching.block_patch import HandedAttentionError

    log = Log()
    ours_first = with_patches(env["plain"], ours(log))
    patched = with_patches(ours_first, lambda b, i, prev: bsa_like_patch(b, i, log, hand=True, previous=prev))
    with torch.inference_mode(), pytest.raises(HandedAttentionError, match="BlockSparseAttention") as info:
        stock(env, patched)
    assert info.value.block_index == 0 and "memory_mode=low_vram" in str(info.value)
    assert "test_block_sparse_contract" in str(info.value)  # names the attention it was handed
    assert log.attention == [] and log.scopes == []  # nothing ran past the refusal


def test_before_a_patch_that_hands_nothing_ours_runs_inside_it(env):
    log = Log()
    ours_first = with_patches(env["plain"], ours(log))
    patched = with_patches(ours_first, lambda b, i, prev: bsa_like_patch(b, i, log, hand=False, previous=prev))
    sv, sa = stock(env, env["plain"])
    with torch.inference_mode():
        ov, oa = stock(env, patched)
    assert log.blocks[:2] == [0, -1] and log.blocks.count(-1) >= 2  # its patch, then our streamed block 0
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5


def test_reinstalling_ours_replaces_our_own_and_keeps_the_foreign_previous(env):
    from longmedia.comfy.patching.block_patch import chained_previous

    log = Log()
    foreign = with_patches(env["plain"], lambda b, i, prev: bsa_like_patch(b, i, log, hand=False, previous=prev))
    twice = with_patches(with_patches(foreign, ours()), lambda b, i, prev: ours()(b, i, chained_previous(prev)))
    fn = twice.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)]
    base = foreign.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)]
    assert fn.previous is base  # not our first replacement: no stacking


# --- the real node, both install orders -------------------------------------------------------------------------

def test_real_bsa_then_ours_streamed_chains_it_as_previous(env):
    """The real node installed first (both lines): our replacement keeps its patches as `previous`; they run first
    and call our streamed block (on the CPU they hand no attention)."""
    bsa = bsa_module()
    patched = bsa.BlockSparseAttention.execute(env["plain"], {"selection": "sol-attn", "tau": 1.3}, 0.0, 1.0).result[0]
    bsa_fns = dict(patched.model_options["transformer_options"]["patches_replace"]["dit"])
    log, seen = Log(), []

    def make(block, i, previous):
        assert previous is bsa_fns[("double_block", i)]

        def recorded(args, extra):
            seen.append(i)
            return previous(args, extra)
        return ours(log)(block, i, recorded)

    chained = with_patches(patched, make)
    sv, sa = stock(env, env["plain"])
    with torch.inference_mode():
        ov, oa = stock(env, chained)
    assert seen[:N] == list(range(N)) and log.blocks.count(-1) == seen.count(0)  # BSA's patch ran ours each time
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5
    if "previous" in inspect.signature(bsa.make_h3_block_patch).parameters:  # the chaining line scopes each block
        assert all(scope is not None and scope[1] in range(N) for scope in log.scopes)


def test_ours_then_real_chaining_bsa_keeps_ours_as_previous(env):
    bsa = chaining_bsa()
    log = Log()
    ours_first = with_patches(env["plain"], ours(log))
    patched = bsa.BlockSparseAttention.execute(ours_first, {"selection": "sol-attn", "tau": 1.3}, 0.0, 1.0).result[0]
    ours_fns = ours_first.model_options["transformer_options"]["patches_replace"]["dit"]
    top = patched.model_options["transformer_options"]["patches_replace"]["dit"]
    assert all(top[k]._block_sparse_attention_previous is ours_fns[k] for k in ours_fns)
    sv, sa = stock(env, env["plain"])
    with torch.inference_mode():
        ov, oa = stock(env, patched)
    assert log.blocks.count(-1) >= 2 and len(log.scopes) >= 2 * N
    assert [s[1] for s in log.scopes[:N]] == list(range(N))  # ours ran inside BSA's scope, block by block
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5


def test_the_sampler_refuses_streamed_blocks_on_a_bsa_model_before_any_work(env):
    from longmedia.comfy.passes.sampler import run_sampler

    bsa = bsa_module()
    patched = bsa.BlockSparseAttention.execute(env["plain"], {"selection": "sol-attn", "tau": 1.3}, 0.0, 1.0).result[0]
    with torch.inference_mode(), pytest.raises(LongMediaInputError, match="no query-row range") as info:
        run_sampler(*job(patched), PlanRequest(**STREAMED))
    assert "BlockSparseAttention" in str(info.value) and "memory_mode=normal" in str(info.value)


# --- attention overrides: BSA re-installs its own on top every step ---------------------------------------------

@pytest.mark.parametrize("order", ["ours_then_bsa", "bsa_then_ours"])
def test_our_override_chains_with_bsas_in_both_orders(comfy_inprocess, order):
    """BSA's ON_PREPARE_STATE puts its override on top of whatever is there (ours included) every step; on the CPU
    it declines and calls its `previous`. Either way round every call is answered once, by the right backend."""
    import comfy.ldm.modules.attention as attn

    from longmedia.attention.backends import FLOATS, default_registry
    from longmedia.attention.dispatcher import resolve_attention
    from longmedia.attention.protocol import sdpa_attention
    from longmedia.attention.registry import BackendSpec
    from longmedia.comfy.patching.attention_override import (
        OVERRIDE_KEY,
        LongMediaAttentionOverride,
        install_attention_override,
    )

    bsa = bsa_module()
    calls = []

    def spy(ctx):
        def fn(q, k, v, *, q_offset=0):
            calls.append("ours")
            return sdpa_attention(q, k, v)
        return fn

    registry = default_registry().with_backends(BackendSpec(name="spy_exact", exact=True, dtypes=FLOATS, cpu=True,
                                                            factory=spy, speed_rank=-1))
    heads, dim, seq = 4, 32, 96
    choice = resolve_attention("auto", seq_len=seq, heads=heads, head_dim=dim, dtype=torch.float32,
                               device_capability=None, registry=registry)
    patch = bsa.SparseAttnPatch(tau=1.3, topk_ratio=0.0, vsa=False, sigma_start=1e9, sigma_end=0.0, min_tokens=0,
                                dense_blocks=set(), sink_conditioning="off", extra_tokens=0, verbose=False)
    topts: dict = {}
    if order == "ours_then_bsa":
        install_attention_override(topts, choice, registry=registry)
        bsa.install_override(patch, topts)  # what its ON_PREPARE_STATE callback does each step
        bsa.install_override(patch, topts)  # idempotent once on top
        assert getattr(topts[OVERRIDE_KEY], "__module__", "") == bsa.__name__
    else:
        bsa.install_override(patch, topts)
        install_attention_override(topts, choice, registry=registry)
        assert isinstance(topts[OVERRIDE_KEY], LongMediaAttentionOverride)
        assert topts[OVERRIDE_KEY].previous.__module__ == bsa.__name__
    g = torch.Generator().manual_seed(317)
    q, k, v = (torch.randn(1, heads, seq, dim, generator=g) for _ in range(3))
    box = getattr(attn, "AttentionTensorContainer", lambda t: t)
    out = attn.optimized_attention(box(q), box(k), box(v), heads, mask=None, skip_reshape=True,
                                   transformer_options=topts)
    assert calls == ["ours"]  # answered once, by our backend, through BSA's declined call or directly
    torch.testing.assert_close(out, sdpa_attention(q, k, v), rtol=1e-5, atol=1e-5)
