"""Tiny random-weight MiniMax H3 checkpoints in ComfyUI's state-dict layout.

`python -m longmedia.testing.tiny_h3 OUT_DIR [--variant bf16|fp32|int8 ...] [--seed N] [--blocks N]
[--pdd-heads N] [--gate-compress]` writes `tiny_h3_<variant>.safetensors` files that ComfyUI's own
loaders detect as `minimax_h3` (UNETLoader / `comfy.sd.load_diffusion_model`).

Upstream-generation features (ComfyUI 0.38.x): `pdd_heads=n > 1` stacks n output heads by rows in
`final_layer.video_out`/`audio_out` (a PDD head bank: head 0 full, 1..n-1 offsets, scaled small);
`gate_compress=True` adds every block's VSA gate `blocks.N.attn.to_gate_compress.weight`
[heads*head_dim, hidden]. Such files are named `tiny_h3_<variant>_pdd<n>` / `_gate`.

Every tensor is drawn from its own generator seeded by (seed, key), so the variants hold the same
model: bf16 is the fp32 weights rounded, int8 is the bf16 file with the block linears quantised
tensorwise (int8 `weight`, fp32 scalar `weight_scale`, uint8 `comfy_quant` JSON per layer).
Scales keep the forward finite and non-trivial: linears ~ N(0, 1/fan_in), norm weights ~ 1 + 0.1 N,
adaLN projections small so the modulation is near identity but nonzero, `rope.inv_freq` as RoPE.
"""

from __future__ import annotations

import argparse
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch

from ..h3.dims import H3Dims

TINY_DIMS = H3Dims(
    hidden=128, heads=4, head_dim=32, ffn=256, num_blocks=2, refiner_blocks=1, text_dim=96,
    video_channels=24, audio_channels=32, rope_inv_freq_len=4, time_embed_dim=64,
)
"""Test dims: text_dim differs from hidden (so the token refiner runs), rot_dim 24 of head_dim 32."""

VARIANTS = ("bf16", "fp32", "int8")
TIMESTEP_INPUT_DIM = 32
TIME_EMBED_HIDDEN = 64
VIDEO_PATCH = (1, 2, 2)
ADALN_WEIGHT_GAIN = 0.5
ADALN_BIAS_STD = 0.2
BIAS_STD = 0.02
NORM_WEIGHT_STD = 0.1
ROPE_THETA = 10000.0
INT8_FORMAT = "int8_tensorwise"
MAX_PDD_HEADS = 64
PDD_OFFSET_SCALE = 0.2
QUANTISED_LINEARS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")
"""Linears of each DiT block (`blocks.N.`) stored INT8 in the int8 variant; the refiner stays bf16."""


class TinyH3Error(ValueError):
    """Invalid tiny-checkpoint request: the message names the input, its value and the allowed range."""


@dataclass(frozen=True)
class TensorSpec:
    """One checkpoint tensor: its key, shape, how it is initialised and whether it is an fp32 island."""

    key: str
    shape: tuple[int, ...]
    init: str  # "linear", "adaln", "bias", "adaln_bias", "norm", "rope"
    fp32: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _linear(prefix: str, out_f: int, in_f: int, *, bias: bool, fp32: bool = False,
            adaln: bool = False) -> Iterator[TensorSpec]:
    yield TensorSpec(f"{prefix}.weight", (out_f, in_f), "adaln" if adaln else "linear", fp32)
    if bias:
        yield TensorSpec(f"{prefix}.bias", (out_f,), "adaln_bias" if adaln else "bias", fp32)


def _transformer_block(prefix: str, dims: H3Dims, *, adaln: bool, gate_compress: bool = False
                       ) -> Iterator[TensorSpec]:
    h = dims.hidden
    yield TensorSpec(f"{prefix}.norm1.weight", (h,), "norm")
    yield TensorSpec(f"{prefix}.norm2.weight", (h,), "norm")
    yield from _linear(f"{prefix}.attn.qkv_proj", 3 * dims.inner, h, bias=False)
    yield TensorSpec(f"{prefix}.attn.q_norm.weight", (dims.head_dim,), "norm")
    yield TensorSpec(f"{prefix}.attn.k_norm.weight", (dims.head_dim,), "norm")
    yield from _linear(f"{prefix}.attn.out_proj", h, dims.inner, bias=False)
    if gate_compress:
        yield from _linear(f"{prefix}.attn.to_gate_compress", dims.inner, h, bias=False)
    yield from _linear(f"{prefix}.mlp.fc1", 2 * dims.ffn, h, bias=False)
    yield from _linear(f"{prefix}.mlp.fc2", h, dims.ffn, bias=False)
    if adaln:
        yield from _linear(f"{prefix}.adaln_proj.linear", 6 * h * 3, dims.time_embed_dim, bias=True, adaln=True)


def tensor_specs(dims: H3Dims = TINY_DIMS, *, timestep_input_dim: int = TIMESTEP_INPUT_DIM,
                 time_embed_hidden: int = TIME_EMBED_HIDDEN, pdd_heads: int = 1,
                 gate_compress: bool = False) -> tuple[TensorSpec, ...]:
    """Every tensor of an H3 checkpoint at `dims`, in ComfyUI's `MiniMaxH3Model` key layout."""
    validate_dims(dims)
    _check_pdd_heads(pdd_heads)
    h, ted = dims.hidden, dims.time_embed_dim
    patch_dim = dims.video_channels * math.prod(VIDEO_PATCH)
    specs: list[TensorSpec] = []
    specs += _linear("video_patch_proj", h, patch_dim, bias=True, fp32=True)
    specs += _linear("audio_patch_proj", h, dims.audio_channels, bias=True, fp32=True)
    specs += _linear("condition_proj", h, dims.text_dim, bias=True)
    specs += _linear("time_embedder.proj_in", time_embed_hidden, timestep_input_dim, bias=True, fp32=True)
    specs += _linear("time_embedder.proj_out", ted, time_embed_hidden, bias=True, fp32=True)
    specs.append(TensorSpec("rope.inv_freq", (dims.rope_inv_freq_len,), "rope", True))
    for i in range(dims.refiner_blocks):
        specs += _transformer_block(f"token_refiner.blocks.{i}", dims, adaln=False)
    specs.append(TensorSpec("token_refiner.final_norm.weight", (h,), "norm"))
    for i in range(dims.num_blocks):
        specs += _transformer_block(f"blocks.{i}", dims, adaln=True, gate_compress=gate_compress)
    specs.append(TensorSpec("final_layer.norm.weight", (h,), "norm"))
    specs += _linear("final_layer.adaln_proj.linear", 2 * h, ted, bias=True, adaln=True)
    specs += _linear("final_layer.video_out", pdd_heads * patch_dim, h, bias=True, fp32=True)
    specs += _linear("final_layer.audio_out", pdd_heads * dims.audio_channels, h, bias=True, fp32=True)
    return tuple(specs)


def validate_dims(dims: H3Dims) -> None:
    """Raise TinyH3Error when `dims` cannot form an H3 model ComfyUI builds and runs."""
    for name in ("hidden", "heads", "head_dim", "ffn", "num_blocks", "text_dim", "video_channels",
                 "audio_channels", "rope_inv_freq_len", "time_embed_dim"):
        value = getattr(dims, name)
        if not isinstance(value, int) or value < 1:
            raise TinyH3Error(f"dims.{name} must be an integer >= 1, got {value!r}: pass a positive size")
    if dims.refiner_blocks < 0:
        raise TinyH3Error(f"dims.refiner_blocks must be >= 0, got {dims.refiner_blocks}")
    if dims.rot_dim > dims.head_dim:
        raise TinyH3Error(
            f"dims.rope_inv_freq_len={dims.rope_inv_freq_len} gives rot_dim 3*2*len={dims.rot_dim} > "
            f"head_dim={dims.head_dim}: lower rope_inv_freq_len to <= {dims.head_dim // 6}")
    if dims.head_dim % 2:
        raise TinyH3Error(f"dims.head_dim must be even (split-half rope), got {dims.head_dim}")


def _check_pdd_heads(pdd_heads: int) -> None:
    if not isinstance(pdd_heads, int) or isinstance(pdd_heads, bool) or not 1 <= pdd_heads <= MAX_PDD_HEADS:
        raise TinyH3Error(f"pdd_heads must be an integer in 1..{MAX_PDD_HEADS} (1 = a plain head), got {pdd_heads!r}")


def _bank_offsets_scaled(spec: TensorSpec, value: torch.Tensor, pdd_heads: int) -> torch.Tensor:
    """A PDD bank's heads 1..n-1 are offsets from head 0: keep them small."""
    if pdd_heads == 1 or not spec.key.startswith(("final_layer.video_out.", "final_layer.audio_out.")):
        return value
    rows = spec.shape[0] // pdd_heads
    value = value.clone()
    value[rows:] *= PDD_OFFSET_SCALE
    return value


def key_seed(seed: int, key: str) -> int:
    """Generator seed of one tensor: stable across variants, block counts and Python runs."""
    return (int(seed) * 1_000_003 + zlib.crc32(key.encode("utf-8"))) % (2 ** 63)


def seeded_normal(seed: int, key: str, shape: Sequence[int]) -> torch.Tensor:
    """Standard normal fp32 tensor drawn from the (seed, key) generator on the CPU."""
    gen = torch.Generator("cpu").manual_seed(key_seed(seed, key))
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32)


def master_tensor(spec: TensorSpec, seed: int) -> torch.Tensor:
    """The fp32 value of one tensor before the variant's storage cast."""
    if spec.init == "rope":
        return rope_inv_freq(spec.shape[0])
    return initialised(spec, seeded_normal(seed, spec.key, spec.shape))


def rope_inv_freq(n: int) -> torch.Tensor:
    """`rope.inv_freq`: theta^(-i/n), i < n (float64; stored fp32)."""
    return ROPE_THETA ** (-torch.arange(n, dtype=torch.float64) / n)


def initialised(spec: TensorSpec, x: torch.Tensor) -> torch.Tensor:
    """Scale a standard normal draw `x` of `spec`'s shape to the tensor's init."""
    if spec.init == "linear":
        return x / math.sqrt(spec.shape[1])
    if spec.init == "adaln":
        return x * (ADALN_WEIGHT_GAIN / math.sqrt(spec.shape[1]))
    if spec.init == "bias":
        return x * BIAS_STD
    if spec.init == "adaln_bias":
        return x * ADALN_BIAS_STD
    if spec.init == "norm":
        return 1.0 + NORM_WEIGHT_STD * x
    raise TinyH3Error(f"TensorSpec.init for {spec.key} is {spec.init!r}; allowed: linear, adaln, bias, "
                      "adaln_bias, norm, rope")


def quantise_int8_tensorwise(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Absmax tensorwise INT8: (int8 weight, fp32 scalar scale) with weight ~ q * scale."""
    scale = (weight.detach().abs().max().float() / 127.0).clamp(min=1e-30)
    q = torch.round(weight.float() / scale).clamp(-127, 127).to(torch.int8)
    return q, scale.reshape(())


def comfy_quant_tensor(fmt: str = INT8_FORMAT) -> torch.Tensor:
    """The per-layer `comfy_quant` entry ComfyUI stores: the JSON config as uint8 bytes."""
    return torch.tensor(list(json.dumps({"format": fmt}).encode("utf-8")), dtype=torch.uint8)


def is_quantised_key(key: str) -> bool:
    """True for a `blocks.N.<linear>.weight` key the int8 variant stores as INT8."""
    parts = key.split(".")
    return (len(parts) == 5 and parts[0] == "blocks" and parts[-1] == "weight"
            and ".".join(parts[2:4]) in QUANTISED_LINEARS)


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise TinyH3Error(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def tiny_h3_state_dict(dims: H3Dims = TINY_DIMS, *, variant: str = "bf16", seed: int = 0,
                       timestep_input_dim: int = TIMESTEP_INPUT_DIM, time_embed_hidden: int = TIME_EMBED_HIDDEN,
                       pdd_heads: int = 1, gate_compress: bool = False) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors in memory (what `write_tiny_h3` saves), keyed as ComfyUI loads them."""
    _check_variant(variant)
    store = torch.float32 if variant == "fp32" else torch.bfloat16
    out: dict[str, torch.Tensor] = {}
    for spec in tensor_specs(dims, timestep_input_dim=timestep_input_dim, time_embed_hidden=time_embed_hidden,
                             pdd_heads=pdd_heads, gate_compress=gate_compress):
        value = _bank_offsets_scaled(spec, master_tensor(spec, seed), pdd_heads)
        if spec.fp32:
            out[spec.key] = value.to(torch.float32).contiguous()
            continue
        value = value.to(store)
        if variant == "int8" and is_quantised_key(spec.key):
            layer = spec.key[: -len(".weight")]
            q, scale = quantise_int8_tensorwise(value)
            out[spec.key] = q.contiguous()
            out[f"{layer}.weight_scale"] = scale.contiguous()
            out[f"{layer}.comfy_quant"] = comfy_quant_tensor()
        else:
            out[spec.key] = value.contiguous()
    return out


def comfy_transformer_config(dims: H3Dims = TINY_DIMS, *, timestep_input_dim: int = TIMESTEP_INPUT_DIM,
                             time_embed_hidden: int = TIME_EMBED_HIDDEN) -> dict[str, int]:
    """The `transformer` section of the metadata config: ComfyUI's detected keys, valued for `dims`."""
    return {
        "num_layers": dims.num_blocks,
        "token_refiner_num_layers": dims.refiner_blocks,
        "hidden_size": dims.hidden,
        "latents_dim": dims.video_channels,
        "audio_latents_dim": dims.audio_channels,
        "attention_head_dim": dims.head_dim,
        "num_attention_heads": dims.heads,
        "ffn_hidden_size": dims.ffn,
        "text_dim": dims.text_dim,
        "timestep_input_dim": timestep_input_dim,
        "time_embed_hidden_size": time_embed_hidden,
        "time_embed_dim": dims.time_embed_dim,
        "rope_inv_freq_len": dims.rope_inv_freq_len,
    }


def tiny_h3_metadata(dims: H3Dims = TINY_DIMS, *, variant: str = "bf16", seed: int = 0,
                     timestep_input_dim: int = TIMESTEP_INPUT_DIM,
                     time_embed_hidden: int = TIME_EMBED_HIDDEN) -> dict[str, str]:
    """Safetensors metadata: ComfyUI's `config` JSON (read by model detection) plus our provenance."""
    config = {"transformer": comfy_transformer_config(dims, timestep_input_dim=timestep_input_dim,
                                                      time_embed_hidden=time_embed_hidden)}
    provenance = {"generator": "longmedia.testing.tiny_h3", "variant": variant, "seed": int(seed),
                  "random_weights": True}
    return {"config": json.dumps(config, sort_keys=True), "longmedia_tiny_h3": json.dumps(provenance, sort_keys=True)}


def default_filename(variant: str, pdd_heads: int = 1, gate_compress: bool = False) -> str:
    suffix = (f"_pdd{pdd_heads}" if pdd_heads > 1 else "") + ("_gate" if gate_compress else "")
    return f"tiny_h3_{variant}{suffix}.safetensors"


def write_tiny_h3(path: str | Path, *, dims: H3Dims = TINY_DIMS, variant: str = "bf16", seed: int = 0,
                  timestep_input_dim: int = TIMESTEP_INPUT_DIM, time_embed_hidden: int = TIME_EMBED_HIDDEN,
                  pdd_heads: int = 1, gate_compress: bool = False) -> Path:
    """Write one tiny checkpoint and return its file path.

    `path` ending in `.safetensors` is the file itself; anything else is a directory (created if
    needed) that receives `tiny_h3_<variant>.safetensors`.
    """
    from safetensors.torch import save_file

    _check_variant(variant)
    path = Path(path)
    if path.suffix != ".safetensors":
        path = path / default_filename(variant, pdd_heads, gate_compress)
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"timestep_input_dim": timestep_input_dim, "time_embed_hidden": time_embed_hidden}
    tensors = tiny_h3_state_dict(dims, variant=variant, seed=seed, pdd_heads=pdd_heads, gate_compress=gate_compress,
                                 **kwargs)
    save_file(tensors, str(path), metadata=tiny_h3_metadata(dims, variant=variant, seed=seed, **kwargs))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m longmedia.testing.tiny_h3", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory that receives tiny_h3_<variant>.safetensors")
    parser.add_argument("--variant", action="append", choices=VARIANTS,
                        help="variant to write; repeat for several (default: all of bf16, fp32, int8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blocks", type=int, default=TINY_DIMS.num_blocks, help="DiT blocks")
    parser.add_argument("--refiner-blocks", type=int, default=TINY_DIMS.refiner_blocks)
    parser.add_argument("--hidden", type=int, default=TINY_DIMS.hidden)
    parser.add_argument("--heads", type=int, default=TINY_DIMS.heads)
    parser.add_argument("--head-dim", type=int, default=TINY_DIMS.head_dim)
    parser.add_argument("--ffn", type=int, default=TINY_DIMS.ffn)
    parser.add_argument("--text-dim", type=int, default=TINY_DIMS.text_dim)
    parser.add_argument("--pdd-heads", type=int, default=1, help=f"PDD output heads per stream, 1..{MAX_PDD_HEADS}")
    parser.add_argument("--gate-compress", action="store_true", help="add the VSA gate to every block's attention")
    args = parser.parse_args(argv)
    dims = H3Dims(hidden=args.hidden, heads=args.heads, head_dim=args.head_dim, ffn=args.ffn,
                  num_blocks=args.blocks, refiner_blocks=args.refiner_blocks, text_dim=args.text_dim,
                  video_channels=TINY_DIMS.video_channels, audio_channels=TINY_DIMS.audio_channels,
                  rope_inv_freq_len=TINY_DIMS.rope_inv_freq_len, time_embed_dim=TINY_DIMS.time_embed_dim)
    try:
        validate_dims(dims)
        _check_pdd_heads(args.pdd_heads)
    except TinyH3Error as err:
        parser.error(str(err))
    for variant in args.variant or VARIANTS:
        path = write_tiny_h3(args.out_dir, dims=dims, variant=variant, seed=args.seed, pdd_heads=args.pdd_heads,
                             gate_compress=args.gate_compress)
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
