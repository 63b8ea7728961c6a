"""Full-width random-weight MiniMax H3 checkpoints, generated on the GPU and written block by block.

`python -m longmedia.testing.full_h3 OUT_DIR [--variant bf16|int8 ...] [--blocks N] [--device cuda] [--seed N]`
writes `full_h3_<variant>_<N>blocks.safetensors` at H3's full width (hidden 5376, 56 x 128 heads,
ffn 14336, text dim 5120, 2 refiner blocks; `--blocks` DiT blocks, 50 by default) in ComfyUI's key
layout, so UNETLoader detects it as `minimax_h3`.

The tensors, their initialisation and the INT8 layout are tiny_h3's (`tensor_specs`, `initialised`,
`quantise_int8_tensorwise`, `comfy_quant`): int8 stores each block's qkv/out/fc1/fc2 weight as int8
with an fp32 scalar `weight_scale` and a uint8 `comfy_quant` JSON, as comfy-kitchen loads it. Each
tensor is drawn from its own (seed, key) generator on `--device` and written straight to the file:
the safetensors header is computed from the specs first, so at most one tensor is ever held in RAM.
On the CPU the file holds exactly the tensors `tiny_h3.write_tiny_h3` writes for the same dims (a
test checks that); on CUDA the draws come from CUDA's generator, so the values differ.
Sizes at 50 blocks: bf16 ~62 GiB, int8 ~42 GiB (the adaLN projections stay bf16).
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..h3.dims import H3_FULL, H3Dims
from .tiny_h3 import (
    TensorSpec,
    TinyH3Error,
    comfy_quant_tensor,
    initialised,
    is_quantised_key,
    key_seed,
    quantise_int8_tensorwise,
    rope_inv_freq,
    tensor_specs,
    tiny_h3_metadata,
)

FULL_TIMESTEP_INPUT_DIM = 256    # ComfyUI's MiniMaxH3Model defaults
FULL_TIME_EMBED_HIDDEN = 5376
VARIANTS = ("bf16", "int8")
_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int8: "I8", torch.uint8: "U8"}


@dataclass(frozen=True)
class Entry:
    """One tensor as stored: key, storage dtype and shape (an INT8 layer adds weight_scale and comfy_quant)."""

    key: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    spec: TensorSpec
    part: str  # "value", "scale" or "quant"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def full_dims(blocks: int = H3_FULL.num_blocks) -> H3Dims:
    if not isinstance(blocks, int) or blocks < 1 or blocks > 1024:
        raise TinyH3Error(f"blocks must be an integer in 1..1024, got {blocks!r}")
    return replace(H3_FULL, num_blocks=blocks)


def entries(dims: H3Dims, variant: str, *, timestep_input_dim: int = FULL_TIMESTEP_INPUT_DIM,
            time_embed_hidden: int = FULL_TIME_EMBED_HIDDEN) -> tuple[Entry, ...]:
    """Every stored tensor in file order, exactly as tiny_h3's state dict for `variant` holds them."""
    if variant not in VARIANTS + ("fp32",):
        raise TinyH3Error(f"variant must be one of bf16, int8 (fp32 for tests), got {variant!r}")
    store = torch.float32 if variant == "fp32" else torch.bfloat16
    quant_len = comfy_quant_tensor().numel()
    out: list[Entry] = []
    for spec in tensor_specs(dims, timestep_input_dim=timestep_input_dim, time_embed_hidden=time_embed_hidden):
        if spec.fp32:
            out.append(Entry(spec.key, torch.float32, spec.shape, spec, "value"))
        elif variant == "int8" and is_quantised_key(spec.key):
            layer = spec.key[: -len(".weight")]
            out += [Entry(spec.key, torch.int8, spec.shape, spec, "value"),
                    Entry(f"{layer}.weight_scale", torch.float32, (), spec, "scale"),
                    Entry(f"{layer}.comfy_quant", torch.uint8, (quant_len,), spec, "quant")]
        else:
            out.append(Entry(spec.key, store, spec.shape, spec, "value"))
    return tuple(out)


def header_bytes(items: Sequence[Entry], metadata: dict[str, str]) -> bytes:
    """The safetensors header (8-byte length + JSON padded to 8 bytes) for `items` laid out back to back."""
    table: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for e in items:
        table[e.key] = {"dtype": _ST_DTYPES[e.dtype], "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(table, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def drawn(spec: TensorSpec, seed: int, device: torch.device) -> torch.Tensor:
    """The fp32 master value of `spec`, drawn on `device` from its (seed, key) generator."""
    if spec.init == "rope":
        return rope_inv_freq(spec.shape[0]).to(device)
    gen = torch.Generator(device).manual_seed(key_seed(seed, spec.key))
    return initialised(spec, torch.randn(spec.shape, generator=gen, dtype=torch.float32, device=device))


def stored_tensors(items: Sequence[Entry], seed: int, device: torch.device) -> Iterator[tuple[Entry, torch.Tensor]]:
    """(entry, CPU tensor) in file order; a quantised layer's three entries share one draw."""
    cache: tuple[str, tuple[torch.Tensor, torch.Tensor]] | None = None
    for e in items:
        if e.part == "quant":
            yield e, comfy_quant_tensor()
            continue
        if e.dtype == torch.int8 or e.part == "scale":
            if cache is None or cache[0] != e.spec.key:
                value = drawn(e.spec, seed, device).to(torch.bfloat16)
                cache = (e.spec.key, quantise_int8_tensorwise(value))
                del value
            q, scale = cache[1]
            yield e, (q if e.part == "value" else scale).cpu()
            if e.part == "scale":
                cache = None
            continue
        yield e, drawn(e.spec, seed, device).to(e.dtype).cpu()


def default_filename(variant: str, blocks: int) -> str:
    return f"full_h3_{variant}_{blocks}blocks.safetensors"


def write_full_h3(path: str | Path, *, variant: str = "int8", dims: H3Dims | None = None, seed: int = 0,
                  device: str | torch.device = "cuda", timestep_input_dim: int = FULL_TIMESTEP_INPUT_DIM,
                  time_embed_hidden: int = FULL_TIME_EMBED_HIDDEN) -> Path:
    """Write one checkpoint tensor by tensor and return its path (a directory gets the default name).

    An existing file with the same header (dims, variant, seed) is kept as it is.
    """
    dims = dims or full_dims()
    device = torch.device(device)
    path = Path(path)
    if path.suffix != ".safetensors":
        path = path / default_filename(variant, dims.num_blocks)
    items = entries(dims, variant, timestep_input_dim=timestep_input_dim, time_embed_hidden=time_embed_hidden)
    metadata = tiny_h3_metadata(dims, variant=variant, seed=seed, timestep_input_dim=timestep_input_dim,
                                time_embed_hidden=time_embed_hidden)
    metadata["longmedia_tiny_h3"] = json.dumps(json.loads(metadata["longmedia_tiny_h3"]) | {
        "generator": "longmedia.testing.full_h3", "draw_device": device.type}, sort_keys=True)
    header = header_bytes(items, metadata)
    total = len(header) + sum(e.nbytes for e in items)
    if path.is_file() and path.stat().st_size == total:
        with open(path, "rb") as f:
            if f.read(len(header)) == header:
                return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as f:
        f.write(header)
        for e, t in stored_tensors(items, seed, device):
            data = t.contiguous().reshape(-1).view(torch.uint8).numpy()
            if data.nbytes != e.nbytes:
                raise TinyH3Error(f"{e.key}: produced {data.nbytes} bytes, header says {e.nbytes}")
            f.write(memoryview(data))
    tmp.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m longmedia.testing.full_h3", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory that receives full_h3_<variant>_<N>blocks.safetensors")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="repeat for several (default: int8)")
    parser.add_argument("--blocks", type=int, default=H3_FULL.num_blocks, help="DiT blocks (1..1024, default 50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the tensors are drawn (default: cuda when available)")
    args = parser.parse_args(argv)
    try:
        dims = full_dims(args.blocks)
    except TinyH3Error as err:
        parser.error(f"--blocks: {err}")
    for variant in args.variant or ["int8"]:
        path = write_full_h3(args.out_dir, variant=variant, dims=dims, seed=args.seed, device=args.device)
        print(f"{path} ({path.stat().st_size / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
