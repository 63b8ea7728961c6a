"""What ComfyUI runs for attention, as a plain fact: `HostAttention` (detected in longmedia/comfy/host/attention.py).

`attention_mode=auto` keeps the attention the user chose for ComfyUI (a flag such as
`--use-sage-attention`, a node's attention override, xformers installed) and swaps in the fastest exact
backend only where ComfyUI runs its own default pick (PyTorch attention, or sub-quadratic where PyTorch
attention is off) or where the chosen one cannot run in the planned path (dispatcher.py). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

APPROXIMATE_MARKERS = ("sage", "int8", "fp8", "fp4")
"""Function-name parts of quantised backends (sage, comfy-kitchen int8, fp8/fp4): not exact."""
KINDS = (("kitchen", "kitchen_int8"), ("sage", "sage"), ("flash", "flash"), ("xformers", "xformers"),
         ("pytorch", "pytorch"), ("sub_quad", "sub_quad"), ("split", "split"), ("basic", "basic"))
"""(part of the function's name, kind), first match wins; anything else is `other`."""
CUDA_ONLY = frozenset({"sage", "flash", "kitchen_int8", "xformers"})
QUANTISED_COPIES = frozenset({"sage", "kitchen_int8"})
"""Kinds that quantise a copy of q, k and v on every call (about one byte per element each)."""


def is_exact_function(name: str | None) -> bool:
    """Whether an attention function (by name, e.g. `attention_sage`) is exact; unknown (None) counts as exact."""
    if name is None:
        return True
    lowered = name.lower()
    return not any(marker in lowered for marker in APPROXIMATE_MARKERS)


@dataclass(frozen=True)
class HostAttention:
    """The attention ComfyUI runs for this model.

    function: the attention function's name (`attention_sage`), or `module.name` of an override a node
    installed on the model. source: how it came to run (`--use-sage-attention`, `ComfyUI's default`, ...).
    chosen: the user chose it (a flag, a node, an installed package); False = ComfyUI's own default pick.
    """

    function: str
    source: str
    chosen: bool

    def __post_init__(self) -> None:
        if not isinstance(self.function, str) or not self.function:
            raise TypeError(f"HostAttention.function must be a non-empty str, got {self.function!r}")
        if not isinstance(self.chosen, bool):
            raise TypeError(f"HostAttention.chosen must be a bool, got {self.chosen!r}")

    @property
    def kind(self) -> str:
        lowered = self.function.lower()
        return next((kind for part, kind in KINDS if part in lowered), "other")

    @property
    def exact(self) -> bool:
        return is_exact_function(self.function)

    @property
    def swappable(self) -> bool:
        """ComfyUI's own default pick (not the user's): auto may run the fastest exact backend instead.
        PyTorch attention counts as swappable even when named by --use-pytorch-cross-attention: the
        exact backends auto picks are PyTorch SDPA kernels or exact kernels of ours."""
        return not self.chosen or self.kind == "pytorch"

    @property
    def label(self) -> str:
        return f"{self.function} ({self.source})"
