"""Read `HostFeatures` from the ComfyUI this process runs (or can import): each feature by the thing the pack uses,
never by a version number. Imports are inside functions; a module that cannot be imported reads as absent, with the
reason in `notes`."""

from __future__ import annotations

import importlib
import inspect
from importlib import metadata
from pathlib import Path
from typing import Any

from ...report.host_features import HostFeatures

H3_MODULE = "comfy.ldm.minimax.model"
BSA_MODULE = "comfy_extras.nodes_sparse_attention"
ADVANCED_MODULE = "comfy_extras.nodes_model_advanced"
PREFETCH_MODULE = "comfy.model_prefetch"
SYSTEM_MEMORY_MODULE = "comfy.system_memory"
MODEL_MANAGEMENT_MODULE = "comfy.model_management"
CLI_ARGS_MODULE = "comfy.cli_args"


def _module(name: str, notes: list[str]) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:  # named reason: absent in this ComfyUI (or a dependency of it is)
        if not isinstance(error, ModuleNotFoundError) or error.name not in (name, name.rsplit(".", 1)[0]):
            notes.append(f"{name} did not import: {type(error).__name__}: {error}")
        return None


def _parameters(fn: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # named reason: not introspectable (a builtin or a C function)
        return ()


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # named reason: not installed in this environment
        return None


def comfyui_version(root: str | Path | None = None) -> str | None:
    """ComfyUI's `comfyui_version.__version__` (read from `root` when given, else imported)."""
    if root is not None:
        path = Path(root) / "comfyui_version.py"
        if not path.is_file():
            return None
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
        return None
    try:
        return str(importlib.import_module("comfyui_version").__version__)
    except (ImportError, AttributeError):  # named reason: a checkout without the generated version file
        return None


def host_features(root: str | Path | None = None) -> HostFeatures:
    """What this ComfyUI offers the pack (its modules must be importable: inside ComfyUI, or after putting its
    root on sys.path)."""
    notes: list[str] = []
    h3 = _module(H3_MODULE, notes)
    prefetch = _module(PREFETCH_MODULE, notes)
    bsa = _module(BSA_MODULE, notes)
    advanced = _module(ADVANCED_MODULE, notes)
    system_memory = _module(SYSTEM_MEMORY_MODULE, notes)
    mm = _module(MODEL_MANAGEMENT_MODULE, notes)
    flags = _flags(_module(CLI_ARGS_MODULE, notes))
    block = getattr(h3, "DiTBlock", None)
    final = getattr(h3, "FinalLayer", None)
    if h3 is None:
        notes.append(f"{H3_MODULE} is absent: no MiniMax H3 in this ComfyUI")
    return HostFeatures(
        comfyui_version=comfyui_version(root),
        per_token_rows=hasattr(h3, "_mod_row"),
        pdd_heads="sample_sigmas" in _parameters(getattr(final, "forward", None)),
        vsa_gates="gate_compress" in _parameters(getattr(block, "__init__", None)),
        block_attention_handoff="attention" in _parameters(getattr(block, "forward", None)),
        bsa_present=bsa is not None and hasattr(bsa, "BlockSparseAttention"),
        bsa_chaining="previous" in _parameters(getattr(bsa, "make_h3_block_patch", None)),
        malloc_graphs=callable(getattr(prefetch, "pause_malloc_graph", None)),
        model_attention_backend=hasattr(advanced, "ModelAttentionBackend"),
        kitchen_version=_version("comfy-kitchen"),
        aimdo_version=_version("comfy-aimdo"),
        notes=tuple(notes),
        cgroup_aware_ram=callable(getattr(system_memory, "virtual_memory_available", None)),
        pin_eviction=callable(getattr(mm, "free_pins", None)),
        fast_disk_flag="--fast-disk" in flags,
        disable_fast_disk_flag="--disable-fast-disk" in flags,
    )


def _flags(cli_args: Any) -> frozenset[str]:
    """The option strings of ComfyUI's command line (`comfy.cli_args.parser`); empty where it cannot be read."""
    actions = getattr(getattr(cli_args, "parser", None), "_option_string_actions", None)
    return frozenset(actions) if isinstance(actions, dict) else frozenset()
