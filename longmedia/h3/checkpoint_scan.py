"""Tensor facts of an H3 checkpoint without running it: shapes, storage bytes, quantisation per Linear, dims.

Three sources give the same `TensorEntry` list: a loaded nn.Module (ComfyUI's QuantizedTensor weights
included), a state dict, or a safetensors header read alone (tensors are never loaded; only the tiny
`comfy_quant` JSON tensors are read). Quantised layers are recognised as ComfyUI stores them: a
`<layer>.comfy_quant` JSON ({"format": ...}), `_quantization_metadata` in the header, or the storage
dtype and scale keys (`weight_scale`, `weight_scale_2`, `weight_s_rel`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import LongMediaInputError
from .dims import H3Dims
from .safetensors_header import DTYPE_BYTES, read_header  # noqa: F401  (DTYPE_BYTES: storage bytes per element)

_TORCH_DTYPE_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
                      "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0"}
PLAIN_FORMATS = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}
# ComfyUI format names (QUANT_ALGOS keys) and layout class names -> our short names.
COMFY_FORMATS = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "nvfp4": "nvfp4", "mxfp8": "mxfp8",
                 "int8_tensorwise": "int8", "convrot_w4a4": "w4a4", "asym_w4a8_int8": "w4a8"}
LAYOUT_FORMATS = {"TensorCoreFP8E4M3Layout": "fp8", "TensorCoreFP8E5M2Layout": "fp8", "TensorCoreFP8Layout": "fp8",
                  "TensorCoreNVFP4Layout": "nvfp4", "TensorCoreMXFP8Layout": "mxfp8", "TensorWiseINT8Layout": "int8",
                  "TensorCoreConvRotW4A4Layout": "w4a4", "AsymW4A8Int8Layout": "w4a8"}
PACKED_4BIT = frozenset({"nvfp4", "w4a4", "w4a8"})  # two weights per stored byte along the input dim
SCALE_SUFFIXES = ("weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale", "weight_s_rel",
                  "weight_s_channel", "weight_codebook", "comfy_quant", "scaled_fp8")
_MAX_QUANT_JSON = 4096


@dataclass(frozen=True)
class TensorEntry:
    """One stored tensor: name, storage shape and dtype, physical bytes, and a key that identifies its storage."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    storage_key: Any = None     # equal keys share memory (counted once)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _dtype_name(dtype: Any) -> str:
    return _TORCH_DTYPE_NAMES.get(str(dtype).replace("torch.", ""), str(dtype).replace("torch.", "").upper())


def _tensor_entries(name: str, t: Any) -> list[TensorEntry]:
    """Entries of a torch tensor; a ComfyUI QuantizedTensor yields its stored data and its scale tensors."""
    qdata = getattr(t, "_qdata", None)
    if qdata is not None:
        out = [TensorEntry(name, tuple(qdata.shape), _dtype_name(qdata.dtype), _storage_bytes(qdata), _skey(qdata))]
        params = getattr(t, "_params", None)
        names = [f.name for f in dataclasses.fields(params)] if dataclasses.is_dataclass(params) else []
        for pname, pval in ((n, getattr(params, n)) for n in names):
            if hasattr(pval, "untyped_storage"):
                out.append(TensorEntry(f"{name}.__{pname}", tuple(pval.shape), _dtype_name(pval.dtype),
                                       _storage_bytes(pval), _skey(pval)))
        return out
    return [TensorEntry(name, tuple(t.shape), _dtype_name(t.dtype), _storage_bytes(t), _skey(t))]


def _storage_bytes(t: Any) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
        return int(t.numel() * t.element_size())


def _skey(t: Any) -> Any:
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return ("id", id(t))
    return (str(t.device), ptr) if ptr else ("id", id(t.untyped_storage()))


def entries_from_module(module: Any) -> tuple[list[TensorEntry], dict[str, str]]:
    """(entries, {layer: format}) of a loaded nn.Module; formats come from QuantizedTensor layouts."""
    entries: list[TensorEntry] = []
    formats: dict[str, str] = {}
    for mod_name, mod in module.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        for pname, p in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
            if p is None:
                continue
            entries += _tensor_entries(prefix + pname, p)
            layout = getattr(p, "_layout_cls", None)
            if pname == "weight" and layout is not None:
                fmt = getattr(mod, "quant_format", None)
                formats[mod_name] = COMFY_FORMATS.get(fmt, LAYOUT_FORMATS.get(str(layout), str(layout)))
    return entries, formats


def entries_from_state_dict(sd: Mapping[str, Any]) -> tuple[list[TensorEntry], dict[str, str]]:
    entries: list[TensorEntry] = []
    formats: dict[str, str] = {}
    for name, t in sd.items():
        if name.endswith(".comfy_quant"):
            conf = json.loads(bytes(t.cpu().numpy().tobytes()).decode("utf-8"))
            formats[name[: -len(".comfy_quant")]] = COMFY_FORMATS.get(conf.get("format"), str(conf.get("format")))
        entries += _tensor_entries(name, t)
    return entries, formats


def _quant_format(path: str, where: str, conf: Any) -> str:
    if not isinstance(conf, dict):
        raise LongMediaInputError("model", path, "a complete safetensors checkpoint",
                                  f"Its quantisation config {where} is a JSON {type(conf).__name__}, not an object.")
    fmt = conf.get("format")
    return COMFY_FORMATS.get(fmt, str(fmt))


def _json(path: str, where: str, raw: str | bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:  # a corrupt config string
        raise LongMediaInputError("model", path, "a complete safetensors checkpoint",
                                  f"Its {where} is not valid JSON.") from exc


def entries_from_safetensors(path: str) -> tuple[list[TensorEntry], dict[str, str], dict[str, str]]:
    """(entries, formats, metadata) from the header alone; `comfy_quant` JSONs (a few bytes each) are read."""
    h = read_header(path)
    entries = []
    formats: dict[str, str] = {}
    quant_meta = h.metadata.get("_quantization_metadata")
    if quant_meta:
        layers = _json(path, "_quantization_metadata", quant_meta)
        layers = layers.get("layers", {}) if isinstance(layers, dict) else None
        if not isinstance(layers, dict):
            raise LongMediaInputError("model", path, "a complete safetensors checkpoint",
                                      "Its _quantization_metadata has no object of layers.")
        for layer, conf in layers.items():
            formats[layer] = _quant_format(path, f"for {layer}", conf)
    with open(path, "rb") as f:
        for t in h.tensors:
            if t.name.endswith(".comfy_quant") and t.nbytes <= _MAX_QUANT_JSON:
                f.seek(h.data_start + t.begin)
                conf = _json(path, f"tensor {t.name}", f.read(t.nbytes))
                formats[t.name[: -len(".comfy_quant")]] = _quant_format(path, f"in {t.name}", conf)
            entries.append(TensorEntry(t.name, t.shape, t.dtype, t.nbytes, ("file", t.begin)))
    return entries, formats, h.metadata


def infer_formats(entries: Iterable[TensorEntry], known: dict[str, str]) -> dict[str, str]:
    """Format of every 2-D `.weight` (a Linear), from `known` first, else from storage dtype and scale keys."""
    by_name = {e.name: e for e in entries}
    out = {}
    for e in by_name.values():
        if not e.name.endswith(".weight") or len(e.shape) != 2:
            continue
        layer = e.name[: -len(".weight")]
        if layer in known:
            out[layer] = known[layer]
        elif f"{layer}.weight_s_rel" in by_name:
            out[layer] = "w4a8"
        elif f"{layer}.weight_scale_2" in by_name:
            out[layer] = "nvfp4"
        elif e.dtype == "I8":
            out[layer] = "int8"
        elif e.dtype.startswith("F8"):
            scale = by_name.get(f"{layer}.weight_scale")
            out[layer] = "mxfp8" if scale is not None and scale.dtype == "F8_E8M0" else "fp8"
        else:
            out[layer] = PLAIN_FORMATS.get(e.dtype, e.dtype.lower())
    return out


_H3_MARKERS = ("video_patch_proj.weight", "audio_patch_proj.weight")


def find_prefix(names: Iterable[str], source: str = "checkpoint") -> str:
    """Key prefix of the H3 diffusion model inside a checkpoint ('' or e.g. 'model.diffusion_model.')."""
    names = set(names)
    for n in names:
        if n.endswith(_H3_MARKERS[0]):
            prefix = n[: -len(_H3_MARKERS[0])]
            if f"{prefix}{_H3_MARKERS[1]}" in names:
                return prefix
    raise LongMediaInputError("model", source, "a MiniMax H3 diffusion model",
                              f"Not an H3 checkpoint: none of the H3 keys ({' + '.join(_H3_MARKERS)}, under any "
                              f"prefix) found among its {len(names)} tensors; load an H3 diffusion model.")


def _count_blocks(names: Iterable[str], head: str) -> int:
    ids = {n[len(head):].split(".", 1)[0] for n in names if n.startswith(head)}
    return len({int(i) for i in ids if i.isdigit()})


_CONFIG_KEYS = {"hidden_size": "hidden", "num_layers": "num_blocks", "token_refiner_num_layers": "refiner_blocks",
                "num_attention_heads": "heads", "attention_head_dim": "head_dim", "ffn_hidden_size": "ffn",
                "text_dim": "text_dim", "latents_dim": "video_channels", "audio_latents_dim": "audio_channels",
                "time_embed_dim": "time_embed_dim", "rope_inv_freq_len": "rope_inv_freq_len"}


def detect_dims(entries: Iterable[TensorEntry], formats: dict[str, str], metadata: Mapping[str, str] | None = None,
                source: str = "checkpoint") -> tuple[H3Dims, str]:
    """(H3Dims, key prefix) read from shapes, as ComfyUI's model detection does for minimax_h3."""
    by_name = {e.name: e for e in entries}
    p = find_prefix(by_name, source)

    def bad(fix: str) -> LongMediaInputError:
        return LongMediaInputError("model", source, "a complete MiniMax H3 diffusion model", fix)

    def shape(key: str, rank: int = 1) -> tuple[int, ...]:
        e = by_name.get(p + key)
        if e is None:
            raise bad(f"It lacks {p + key}, a tensor H3 detection needs (a partial or foreign checkpoint).")
        s = e.shape
        if len(s) < rank or not all(isinstance(d, int) and d > 0 for d in s):
            raise bad(f"{p + key} has shape {list(s)}, not the {rank}-D positive shape of an H3 checkpoint.")
        if formats.get(p + key[: -len(".weight")]) in PACKED_4BIT and key.endswith(".weight"):
            s = s[:-1] + (s[-1] * 2,)
        return s

    head_dim = shape("blocks.0.attn.q_norm.weight")[0]
    cfg = dict(
        hidden=shape("video_patch_proj.weight")[0],
        heads=shape("blocks.0.attn.qkv_proj.weight")[0] // (3 * head_dim),
        head_dim=head_dim,
        ffn=shape("blocks.0.mlp.fc1.weight")[0] // 2,
        num_blocks=_count_blocks(by_name, p + "blocks."),
        refiner_blocks=_count_blocks(by_name, p + "token_refiner.blocks."),
        text_dim=shape("condition_proj.weight", 2)[1],
        # from the patch projections' inputs: a PDD head bank stacks n heads in final_layer.*_out rows
        video_channels=shape("video_patch_proj.weight", 2)[1] // 4,
        audio_channels=shape("audio_patch_proj.weight", 2)[1],
        rope_inv_freq_len=shape("rope.inv_freq")[0],
        time_embed_dim=(shape("adaln_t_table")[1] if p + "adaln_t_table" in by_name
                        else shape("time_embedder.proj_out.weight")[0]),
    )
    if metadata and "config" in metadata:
        try:
            config = json.loads(metadata["config"])
        except (json.JSONDecodeError, RecursionError) as exc:  # a corrupt config string in the header
            raise bad("Its __metadata__ config is not valid JSON.") from exc
        transformer = config.get("transformer", {}) if isinstance(config, dict) else None
        if not isinstance(transformer, dict):
            raise bad("Its __metadata__ config has no transformer object.")
        for k, v in transformer.items():
            if k in _CONFIG_KEYS:
                if not _is_count(v):
                    raise bad(f"Its __metadata__ config gives transformer.{k}={v!r}, not a positive integer.")
                cfg[_CONFIG_KEYS[k]] = int(v)
    for k, v in cfg.items():
        if v <= 0:
            raise bad(f"The dimension it implies for {k} is {v}: not an H3 layout.")
    return H3Dims(**cfg), p


def _is_count(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool) and v > 0) or \
        (isinstance(v, str) and v.isdigit() and int(v) > 0)
