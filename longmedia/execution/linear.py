"""Linear layers as the executor sees them: a weight acquired once per phase, sliced by output rows
or input columns, applied to row chunks — for plain and for ComfyUI-quantized weights.

The weight comes from a `WeightAccess` (plain module tensors, or ComfyUI's CastBiasWeightContext in
`comfy_weights.py`). INT8 tensorwise weights stay INT8: one scale for the whole tensor, so slicing the
int8 data is exact, and comfy-kitchen quantises activations per row, so row chunks change nothing.
Other quantized layouts take a named fallback: dequantised once per phase.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Iterator, Protocol

import torch
from torch import nn

INT8_LAYOUT = "TensorWiseINT8Layout"


class WeightAccess(Protocol):
    """Hands out (weight, bias) of a Linear for the duration of a `with` block.

    The executor holds at most two at once (a phase's pair: qkv + out-proj, fc1 + fc2).
    """

    def __call__(self, module: nn.Module, like: torch.Tensor) -> contextlib.AbstractContextManager: ...


@contextlib.contextmanager
def plain_weights(module: nn.Module, like: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """The module's own tensors, moved to the activations' device and dtype when they differ."""
    w, b = module.weight, getattr(module, "bias", None)
    if _layout(w) is None:
        w = w.to(device=like.device, dtype=like.dtype)
    b = b.to(device=like.device, dtype=like.dtype) if b is not None else None
    yield w, b


def _layout(w: torch.Tensor) -> str | None:
    """The comfy-kitchen layout name of a QuantizedTensor, None for a plain tensor."""
    layout = getattr(w, "_layout_cls", None)
    if layout is None:
        return None
    return layout if isinstance(layout, str) else getattr(layout, "__name__", str(layout))


def _int8_plain(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    int8 = importlib.import_module("comfy_kitchen.tensor.int8")
    qdata, scale = int8.TensorWiseINT8Layout.get_plain_tensors(w)
    params = getattr(w, "_params", None)
    extra = {"convrot": getattr(params, "convrot", False), "convrot_groupsize": getattr(params, "convrot_groupsize", 256)}
    return qdata, scale, extra


@dataclass(frozen=True)
class LinearWeight:
    """A weight (plain, or INT8 data + scale) with an optional bias, ready for row chunks."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    int8_scale: torch.Tensor | None = None
    int8_extra: tuple = ()

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> "LinearWeight":
        layout = _layout(weight)
        if layout is None:
            return cls(weight, bias)
        if layout == INT8_LAYOUT and not getattr(getattr(weight, "_params", None), "transposed", False):
            qdata, scale, extra = _int8_plain(weight)
            return cls(qdata, bias, scale, tuple(sorted(extra.items())))
        # named fallback: layouts whose data cannot be sliced row-wise are dequantised once per phase
        return cls(weight.dequantize(), bias)

    def rows(self, start: int, stop: int) -> "LinearWeight":
        """Output features [start, stop): rows of the weight (and of the bias)."""
        bias = self.bias[start:stop] if self.bias is not None else None
        scale = self.int8_scale
        if scale is not None and scale.numel() > 1:  # per-channel INT8: one scale per output row
            scale = scale[start:stop]
        return LinearWeight(self.weight[start:stop], bias, scale, self.int8_extra)

    def cols(self, start: int, stop: int) -> "LinearWeight":
        """Input features [start, stop): a partial product; the bias is dropped (H3's are bias-free)."""
        if self.bias is not None:
            raise ValueError("a column slice of a biased linear would add the bias once per slice")
        weight = self.weight[:, start:stop]
        if self.int8_scale is None:
            return LinearWeight(weight, None)
        if dict(self.int8_extra).get("convrot"):
            # named fallback: a Hadamard-rotated INT8 weight is dequantised for a column slice
            return LinearWeight(self._dequantized()[:, start:stop], None)
        return LinearWeight(weight.contiguous(), None, self.int8_scale, self.int8_extra)

    def _dequantized(self) -> torch.Tensor:
        scale = self.int8_scale.float()
        scale = scale.reshape(-1, 1) if scale.numel() > 1 else scale
        return (self.weight.float() * scale).to(torch.bfloat16)

    def __call__(self, x: torch.Tensor, input_act: str | None = None) -> torch.Tensor:
        if self.int8_scale is not None:
            ck = importlib.import_module("comfy_kitchen")
            return ck.int8_linear(x, self.weight, self.int8_scale, self.bias, x.dtype,
                                  input_act=input_act, **dict(self.int8_extra))
        if input_act is not None:
            x = ACTIVATIONS[input_act](x)
        return nn.functional.linear(x, self.weight, self.bias)


def _swiglu(u: torch.Tensor) -> torch.Tensor:
    gate, up = u.chunk(2, dim=-1)
    return nn.functional.silu(gate).mul_(up)


ACTIVATIONS = {"swiglu": _swiglu}
