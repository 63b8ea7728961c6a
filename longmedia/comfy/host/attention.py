"""Which attention ComfyUI runs for a model, read from the host: a `HostAttention` fact for the planner.

In order, as ComfyUI's wrap_attn decides: an `optimized_attention_override` a node put on the model
(LongMedia's own is looked through; the one ComfyUI's ModelAttentionBackend node writes through
`ModelPatcher.set_model_optimized_attention` is read through to the dense function it names), then the attention a checkpoint's config selects for its layers
(ComfyUI 0.38+: `ComfyAttention.function`, e.g. comfy_kitchen_int8), then the `optimized_attention` H3 calls (the minimax module's binding, else comfy.ldm.modules.attention's),
named by its function and matched to the ComfyUI flag that selects it (comfy.cli_args.args). Works on
ComfyUI 0.33 and 0.38 (both select attention in comfy/ldm/modules/attention.py at import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...attention.host import HostAttention
from ..patching.attention_override import OVERRIDE_KEY, LongMediaAttentionOverride, installed_attention

ATTENTION_MODULE = "comfy.ldm.modules.attention"
FLAGS = {"sage": "use_sage_attention", "flash": "use_flash_attention", "kitchen_int8": "use_ck_attention",
         "split": "use_split_cross_attention", "sub_quad": "use_quad_cross_attention",
         "pytorch": "use_pytorch_cross_attention"}
"""kind -> the comfy.cli_args attribute of the flag that selects it."""
DEFAULT_SOURCES = {"pytorch": "ComfyUI's default", "sub_quad": "ComfyUI's fallback when PyTorch attention is off",
                   "basic": "ComfyUI's last fallback"}


SETTER_MODULE = "comfy.model_patcher"
SETTER_CLOSURE = "optimized_attention_override"
SETTER_FREEVAR = "optimized_attention"
BACKEND_NODE_SOURCE = "ComfyUI's ModelAttentionBackend node (set_model_optimized_attention)"


def backend_node_choice(override: Any) -> Any:
    """The attention function behind an override written by `ModelPatcher.set_model_optimized_attention` (what
    ComfyUI's ModelAttentionBackend node calls with its backend, e.g. attention_pytorch or
    attention_comfy_kitchen_int8), else None. Feature-detected: that setter's closure, `optimized_attention_override`
    in comfy.model_patcher, holding the function in its free variable `optimized_attention`."""
    if getattr(override, "__module__", None) != SETTER_MODULE or getattr(override, "__name__", None) != SETTER_CLOSURE:
        return None
    code, cells = getattr(override, "__code__", None), getattr(override, "__closure__", None)
    if code is None or not cells or SETTER_FREEVAR not in code.co_freevars:
        return None
    try:
        return cells[code.co_freevars.index(SETTER_FREEVAR)].cell_contents
    except ValueError:  # named reason: an empty cell (the setter's variable unbound): not the node's state
        return None


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__


def _override(options: Mapping[str, Any] | None) -> Any:
    current = ((options or {}).get("transformer_options") or {}).get(OVERRIDE_KEY)
    if isinstance(current, LongMediaAttentionOverride):  # ours (a re-run on a patched copy): what it wraps
        current = current.previous
    return current


def checkpoint_attention(diffusion_model: Any) -> Any:
    """The attention function a checkpoint's config selects (the first H3 block whose ComfyAttention has one)."""
    for block in getattr(diffusion_model, "blocks", None) or ():
        function = getattr(getattr(getattr(block, "attn", None), "comfy_attention", None), "function", None)
        if function is not None:
            return function
    return None


def _args() -> Any:
    from comfy.cli_args import args
    return args


def host_attention(*model_options: Mapping[str, Any] | None, diffusion_model: Any = None, args: Any = None,
                   attention: Any = None) -> HostAttention:
    """What ComfyUI runs for a model with these `model_options` (the guider's, then the patcher's: the first
    override found counts) and this H3 `diffusion_model` (its layers' attention config).

    args / attention: injectable for tests (default: comfy.cli_args.args, the installed optimized_attention)."""
    override = next((o for o in map(_override, model_options) if o is not None), None)
    chosen = backend_node_choice(override)
    if chosen is not None:
        return HostAttention(getattr(chosen, "__name__", None) or _name(chosen), BACKEND_NODE_SOURCE, True)
    if override is not None:
        module = getattr(override, "__module__", None) or type(override).__module__
        return HostAttention(f"{module}.{_name(override)}",
                             "an optimized_attention_override a node put on the model", True)
    configured = checkpoint_attention(diffusion_model)
    if configured is not None:
        return HostAttention(getattr(configured, "__name__", None) or _name(configured),
                             "the checkpoint's attention config (ComfyUI 0.38+)", True)
    fn = installed_attention() if attention is None else attention
    args = _args() if args is None else args
    name = getattr(fn, "__name__", None) or type(fn).__name__
    module = getattr(fn, "__module__", "") or ""
    kind = HostAttention(name, "its name", True).kind
    flag = FLAGS.get(kind)
    if flag is not None and getattr(args, flag, False):
        return HostAttention(name, "--" + flag.replace("_", "-"), True)
    if module != ATTENTION_MODULE:
        return HostAttention(name, f"set by {module or 'an unknown module'} (not a ComfyUI flag)", True)
    if kind == "xformers":
        return HostAttention(name, "xformers installed (ComfyUI prefers it; --disable-xformers turns it off)", True)
    if kind in DEFAULT_SOURCES:
        return HostAttention(name, DEFAULT_SOURCES[kind], False)
    return HostAttention(name, "selected by ComfyUI's settings", True)
