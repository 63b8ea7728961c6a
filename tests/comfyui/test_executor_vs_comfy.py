"""The streamed executor against ComfyUI's own H3 DiTBlock (in-process, real ComfyUI code)."""

import dataclasses
import os

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.streamed_block import run_block

ROOT = os.environ.get("LONGMEDIA_COMFYUI_ROOT")
pytestmark = pytest.mark.skipif(not ROOT, reason="LONGMEDIA_COMFYUI_ROOT is not set: real-ComfyUI tests skipped")


@pytest.fixture(scope="module")
def comfy(comfy_inprocess):  # ComfyUI imported from the checkout with `--cpu` set (conftest)
    import comfy.ldm.minimax.model as h3
    import comfy.ops

    from longmedia.comfy.patching import block_patch as comfy_patch
    from longmedia.comfy.patching.attention_override import existing_attention_fn

    comfy_patch.existing_attention = existing_attention_fn
    return h3, comfy.ops, comfy_patch


def make(comfy, dtype, ops_name, seed=0, **block_kwargs):
    h3, ops, _ = comfy
    g = torch.Generator().manual_seed(seed)
    hidden, heads, head_dim, ffn, t_dim = 96, 4, 32, 192, 40
    block = h3.DiTBlock(hidden, heads, head_dim, ffn, t_dim, 1e-5, 1e-5, dtype=dtype, operations=getattr(ops, ops_name),
                        **block_kwargs)
    with torch.no_grad():
        for name, p in block.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(r / p.shape[1] ** 0.5 * (0.2 if "adaln" in name else 1.0) if p.ndim == 2 else 1 + 0.1 * r)
    block.requires_grad_(False)
    s = 389
    x = torch.randn(s, hidden, generator=g).to(dtype)
    t_emb = torch.randn(2, t_dim, generator=g).to(dtype)
    segments = [(0, 40, 4), (40, 120, 0), (120, 200, 2), (200, s, 3)]
    pos = torch.rand(s, 3, generator=g, dtype=torch.float64) * 50
    inv = torch.rand(4, generator=g) + 0.01
    model = h3.MiniMaxH3Model.__new__(h3.MiniMaxH3Model)  # only for its rope helper
    torch.nn.Module.__init__(model)
    model.rope = torch.nn.Module()
    model.rope.register_buffer("inv_freq", inv)
    rope = h3.rope_rotation_table(model.rope_freqs(pos, "cpu"), dtype)
    return block, x, t_emb, segments, rope


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("ops_name", ["disable_weight_init", "manual_cast"])
def test_streamed_matches_comfy_block(comfy, dtype, tol, ops_name):
    _, _, patch = comfy
    block, x, t_emb, segments, rope = make(comfy, dtype, ops_name)
    topts = {}
    stock = block(x.clone(), t_emb, segments, rope, transformer_options=topts)
    assert torch.isfinite(stock).all() and rel(stock, x) > 1e-3
    for chunks in (ChunkSizes(64, 0, 64), ChunkSizes(50, 13, 77), ChunkSizes(128, 0, 40, 2), ChunkSizes(97, 31, 0, 1)):
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks,
                        attention=patch.existing_attention(topts, block.attn.heads), weights=patch.comfy_weights(),
                        interrupt=patch.comfy_interrupt, cast_small=patch.comfy_cast_small)
        assert rel(out, stock) <= tol, chunks


def test_all_heads_streaming_is_bitwise_against_comfy_on_cpu(comfy):
    _, _, patch = comfy
    block, x, t_emb, segments, rope = make(comfy, torch.bfloat16, "disable_weight_init", seed=3)
    stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
    out = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(61, 0, 0),
                    attention=patch.existing_attention({}, block.attn.heads), weights=patch.comfy_weights(),
                    cast_small=patch.comfy_cast_small)
    assert torch.equal(out, stock)


class _Stream:
    """An offload stream that records what it was ordered after."""

    def __init__(self, log):
        self.log = log

    def wait_stream(self, other):
        self.log.append(("wait", other))


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("kind", ["cast_buffer", "faulted", "resident"])
def test_a_held_weight_s_offload_stream_waits_for_compute_before_it_is_handed_back(comfy, monkeypatch, kind, legacy):
    """ComfyUI's uncast leaves a cast-buffer weight's stream unordered (comfy.ops.uncast_bias_weight: no weight_a,
    no bias_a); the access orders it after the compute stream itself, before the cast is released."""
    import comfy.model_management as mm
    import comfy.ops as ops

    _, _, patch = comfy
    log: list = []
    stream = _Stream(log)
    weight = torch.randn(4, 4)
    state = {"cast_buffer": (weight, None, (stream, None, None)),
             "faulted": (weight, None, (stream, torch.device("cuda", 0), None)),
             "resident": (weight, None, (None, torch.device("cuda", 0), None))}[kind]

    class Context:
        def __init__(self, module, like, offloadable=False):
            self.state = state

        def __enter__(self):
            return self.state[:2]

        def __exit__(self, *exc):
            log.append(("uncast", kind))

    monkeypatch.setattr(mm, "current_stream", lambda device: "compute")
    if legacy:  # ComfyUI before CastBiasWeightContext: cast_bias_weight / uncast_bias_weight
        monkeypatch.delattr(ops, "CastBiasWeightContext")
        monkeypatch.setattr(ops, "cast_bias_weight", lambda module, like, offloadable=False: state)
        monkeypatch.setattr(ops, "uncast_bias_weight", lambda m, w, b, st: log.append(("uncast", kind)))
    else:
        monkeypatch.setattr(ops, "CastBiasWeightContext", Context)
    with patch.comfy_weights()(torch.nn.Linear(4, 4), torch.randn(2, 4)) as (w, b):
        assert w is weight and b is None
        log.append(("kernels", None))
    waits = [("wait", "compute")] if kind != "resident" else []
    assert log == [("kernels", None), *waits, ("uncast", kind)]


@dataclasses.dataclass(frozen=True)
class _Op:
    """One operation enqueued on a stream: its position there and what that stream had waited for (vector clock)."""

    kind: str          # "write": a cast copies a weight into the buffer; "read": a compute kernel reads the buffer
    buffer: str
    stream: str
    seq: int
    clock: tuple       # ((stream, ops of it this op is ordered after), ...)

    def before(self, later: "_Op") -> bool:
        """Whether the device must finish this op before `later` starts (same stream, or a wait_stream chain)."""
        return dict(later.clock).get(self.stream, 0) >= self.seq


class _OrderedStream:
    """A CUDA stream as the device orders it: ops run in order, and `wait_stream(other)` orders everything enqueued
    here afterwards after everything enqueued on `other` so far. Records every op in the shared `log`."""

    def __init__(self, name, log):
        self.name, self.log, self.clock = name, log, {name: 0}

    def wait_stream(self, other):
        for name, seq in other.clock.items():
            self.clock[name] = max(self.clock.get(name, 0), seq)

    def enqueue(self, kind, buffer):
        self.clock[self.name] += 1
        self.log.append(_Op(kind, buffer, self.name, self.clock[self.name], tuple(sorted(self.clock.items()))))


class _KernelReads(torch.overrides.TorchFunctionMode):
    """Every torch call that takes a view of a cast buffer is a kernel reading it, enqueued on the compute stream."""

    def __init__(self, compute, buffers):
        super().__init__()
        self.compute, self.buffers, self.quiet = compute, buffers, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.quiet:
            ptrs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor)}
            for name, buf in self.buffers.items():
                if buf.untyped_storage().data_ptr() in ptrs:
                    self.compute.enqueue("read", name)
        return func(*args, **kwargs)


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("kind", ["cast_buffer", "copied"])
def test_no_cast_overwrites_a_held_weight_before_its_last_reader(comfy, monkeypatch, kind, legacy):
    """Two streamed blocks on an ordered-stream model of the device, through ComfyUI's own offload-stream round robin
    (`get_offload_stream`, which orders the previous stream after compute at the next cast), `sync_stream` and
    `uncast_bias_weight`. A cast writes the weight into its stream's one cast buffer (a comfy-aimdo weight that
    could not fault in: state (stream, None, None), which ComfyUI's uncast leaves unordered; "copied": the
    non-dynamic state it orders itself). Each kernel reading a buffer is recorded on the compute stream. Every read
    must be ordered before the next write of its buffer: a stage holds its first weight across all its row chunks,
    after the next cast already ran, so only the access's own wait_stream at hand-back keeps the next cast on that
    stream from overwriting it while the stage's kernels still read it."""
    import comfy.model_management as mm
    import comfy.ops as ops

    _, _, patch = comfy
    blocks = [make(comfy, torch.float32, "disable_weight_init", seed=seed) for seed in (5, 6)]
    log: list[_Op] = []
    compute = _OrderedStream("compute", log)
    streams = [_OrderedStream(name, log) for name in ("offload0", "offload1")]
    biggest = max(p.numel() for b in blocks for p in b[0].parameters())
    buffers = {s.name: torch.randn(biggest) for s in streams}
    reads = _KernelReads(compute, buffers)
    device = torch.device("cuda", 0)   # only a key of ComfyUI's stream table: nothing runs on it

    def cast_bias_weight(s, input=None, dtype=None, device_=None, bias_dtype=None, offloadable=False, **kwargs):
        stream = mm.get_offload_stream(device)
        reads.quiet = True
        weight = buffers[stream.name][:s.weight.numel()].view(s.weight.shape).copy_(s.weight)
        reads.quiet = False
        stream.enqueue("write", stream.name)
        mm.sync_stream(device, stream)
        bias = s.bias.clone() if s.bias is not None else None
        state = (stream, None, None) if kind == "cast_buffer" else (stream, weight, None)
        return (weight, bias, state) if offloadable else (weight, bias)

    monkeypatch.setattr(mm, "NUM_STREAMS", len(streams))
    monkeypatch.setitem(mm.STREAMS, device, streams)
    monkeypatch.setitem(mm.stream_counters, device, 0)
    monkeypatch.setattr(mm, "current_stream", lambda dev: compute)
    monkeypatch.setattr(ops, "cast_bias_weight", cast_bias_weight)
    if legacy:  # ComfyUI before CastBiasWeightContext: cast_bias_weight / uncast_bias_weight
        monkeypatch.delattr(ops, "CastBiasWeightContext")
    chunks = ChunkSizes(64, 0, 64)
    for block, x, t_emb, segments, rope in blocks:
        plain = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks,
                          attention=patch.existing_attention({}, block.attn.heads), cast_small=patch.comfy_cast_small)
        with reads:
            out = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks,
                            attention=patch.existing_attention({}, block.attn.heads), weights=patch.comfy_weights(),
                            interrupt=patch.comfy_interrupt, cast_small=patch.comfy_cast_small)
        assert torch.equal(out, plain)   # the buffers held the weights while they were read (this is synchronous)
    writes = [op for op in log if op.kind == "write"]
    assert len(writes) == 2 * 4 and sum(op.kind == "read" for op in log) > 2 * 4 * 3   # 4 casts a block, chunked
    unordered = []
    for i, op in enumerate(log):
        if op.kind != "read":
            continue
        overwrite = next((w for w in log[i + 1:] if w.kind == "write" and w.buffer == op.buffer), None)
        if overwrite is not None and not op.before(overwrite):
            unordered.append((i, op, overwrite))
    assert not unordered, f"{len(unordered)} reads may run after their buffer is overwritten, first: {unordered[0]}"


def test_one_offload_stream_hands_out_copies(comfy, monkeypatch):
    """With `--async-offload 1` two held weights would share one cast buffer: each is copied, its cast released."""
    import comfy.model_management as mm

    _, _, patch = comfy
    block, x, t_emb, segments, rope = make(comfy, torch.bfloat16, "manual_cast", seed=8)
    two = patch.comfy_weights()
    with two(block.attn.qkv_proj, x) as (w, _):  # two streams (or none, on this CPU): ComfyUI's own tensor
        assert w.data_ptr() == block.attn.qkv_proj.weight.data_ptr()
    monkeypatch.setattr(mm, "NUM_STREAMS", 1)
    one = patch.comfy_weights()
    with one(block.attn.qkv_proj, x) as (w, _):
        assert w.data_ptr() != block.attn.qkv_proj.weight.data_ptr() and torch.equal(w, block.attn.qkv_proj.weight)
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(64, 0, 64),
                        attention=patch.existing_attention({}, block.attn.heads), weights=one,
                        cast_small=patch.comfy_cast_small)
    assert torch.equal(out, stock)


def masked_segments(g, s, mod_rows):
    """A masked job's table (ComfyUI 0.38+): text split into tag runs, per-token rows on the audio and video spans."""
    return [(0, 17, 4), (17, 29, 1), (29, 40, 4), (40, 120, 0),
            (120, 200, torch.randint(0, mod_rows, (80,), generator=g)),
            (200, s, torch.randint(0, mod_rows, (s - 200,), generator=g))]


@pytest.mark.parametrize("chunks", [ChunkSizes(64, 0, 64), ChunkSizes(50, 13, 77), ChunkSizes(128, 0, 40, 2),
                                    ChunkSizes(97, 31, 0, 1), ChunkSizes(0, 0, 33)])
def test_streamed_matches_comfy_block_with_per_token_rows(comfy, chunks):
    _, _, patch = comfy
    block, x, t_emb, _, rope = make(comfy, torch.float32, "disable_weight_init", seed=11)
    segments = masked_segments(torch.Generator().manual_seed(5), x.shape[0], mod_rows=3 * t_emb.shape[0])
    assert sum(b - a for a, b, _ in segments) == x.shape[0]
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        uniform = block(x.clone(), t_emb, [(a, b, 0) for a, b, _ in segments], rope, transformer_options={})
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks,
                        attention=patch.existing_attention({}, block.attn.heads), weights=patch.comfy_weights(),
                        interrupt=patch.comfy_interrupt, cast_small=patch.comfy_cast_small)
    assert rel(stock, uniform) > 1e-3  # the per-token rows matter
    assert rel(out, stock) <= 1e-5, chunks


def test_vsa_gate_is_left_alone_as_the_host_does(comfy):
    """A gate_compress checkpoint's VSA gate is unused by dense attention (only BlockSparseAttention vsa reads it)."""
    import inspect

    h3, _, patch = comfy
    if "gate_compress" not in inspect.signature(h3.DiTBlock.__init__).parameters:
        pytest.skip("this ComfyUI's DiTBlock has no gate_compress (the VSA gate, ComfyUI 0.38+)")
    block, x, t_emb, segments, rope = make(comfy, torch.float32, "disable_weight_init", seed=4, gate_compress=True)
    assert block.attn.to_gate_compress is not None and block.attn.to_gate_compress.weight.abs().sum() > 0
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(64, 0, 64),
                        attention=patch.existing_attention({}, block.attn.heads), weights=patch.comfy_weights(),
                        cast_small=patch.comfy_cast_small)
    assert rel(stock, x) > 1e-3 and rel(out, stock) <= 1e-5


def test_handed_attention_module_is_refused_by_name(comfy):
    from longmedia.comfy.patching.block_patch import HandedAttentionError, streamed_replacement

    _, _, patch = comfy
    block, x, t_emb, segments, rope = make(comfy, torch.float32, "disable_weight_init", seed=6)
    fn = streamed_replacement(block, 0, ChunkSizes(64, 0, 64), patch.existing_attention)
    args = {"img": x.clone(), "t_emb": t_emb, "mod_segments": segments, "rope_freqs": rope, "transformer_options": {}}
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        assert rel(fn(dict(args), {})["img"], stock) <= 1e-5
        with pytest.raises(HandedAttentionError, match="BlockSparseAttention"):
            fn({**args, "attention": lambda h, **kw: h}, {})
