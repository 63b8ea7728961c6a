"""The built-in attention backends: ComfyUI's own, torch SDPA per kernel, our Triton kernels, the references.

Every factory returns an AttentionFn (see protocol.py): q [1, H, rows, D], k/v [1, H, S, D] in,
[1, rows, H * D] out. Kernel modules are imported lazily (`longmedia.kernels` may lack triton).
"""

from __future__ import annotations

import importlib.util
import warnings
import weakref
from collections.abc import Callable
from types import ModuleType

import torch

from .flash4 import flash4_spec
from .kitchen import kitchen_backends
from .protocol import AttentionFn, merge_heads
from .registry import BackendRegistry, BackendSpec, BackendUnavailableError, BuildContext

HALF = frozenset({torch.float16, torch.bfloat16})
FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32})
ANY_CUDA = (0, 0)
QSTREAM = ("qstream_attention",)
QSTREAM_REF = ("qstream_attention_reference", "qstream_attention")
SOL = ("sol_attention",)
SOL_REF = ("sol_attention_reference", "sol_attention")
SOL_BLOCK = 64
REFUSED = ("No available kernel", "No viable backend")
"""How torch says a pinned SDPA kernel cannot take the inputs (older and newer wording)."""


class SdpaFallbackWarning(UserWarning):
    """A pinned SDPA kernel refused the inputs; torch's default kernel choice ran instead (still exact)."""


def _scale_kwargs(context: BuildContext) -> dict[str, float]:
    return {} if context.sm_scale is None else {"scale": context.sm_scale}


# ---- availability checks ----------------------------------------------------------------------

def _sdpa_availability(kernel: str | None, enabled: Callable[[], bool] | None,
                extra: Callable[[], tuple[bool, str]] | None = None) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        if kernel is not None:
            try:
                from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
            except ImportError as err:  # torch older than 2.3 has no sdpa_kernel
                return False, f"torch.nn.attention.sdpa_kernel is missing ({err})"
            if not hasattr(SDPBackend, kernel):
                return False, f"this torch has no SDPBackend.{kernel}"
        if enabled is not None and not enabled():
            return False, f"SDPA {kernel} is disabled in torch.backends.cuda"
        if extra is not None:
            return extra()
        return True, f"torch {torch.__version__} SDPA" + (f" pinned to {kernel}" if kernel else "")
    return check


def _cudnn_present() -> tuple[bool, str]:
    if not torch.backends.cudnn.is_available():
        return False, "this torch build has no cuDNN"
    return True, f"cuDNN {torch.backends.cudnn.version()}"


def _flash_present() -> tuple[bool, str]:
    check = getattr(torch.backends.cuda, "is_flash_attention_available", None)
    if check is not None and not check():
        return False, "this torch build has no flash attention kernel"
    return True, "torch flash attention"


def _entry(module: object, names: tuple[str, ...]) -> Callable | None:
    """The first of `names` the module defines (references may name their function either way)."""
    for name in names:
        fn = getattr(module, name, None)
        if callable(fn):
            return fn
    return None


def _import_kernel(module_name: str) -> ModuleType:
    """One of `longmedia.kernels`' modules, imported on first use (the Triton ones need triton and a driver)."""
    if module_name == "qstream_attention":
        from ..kernels import qstream_attention as module
    elif module_name == "sol_attention":
        from ..kernels import sol_attention as module
    elif module_name == "qstream_reference":
        from ..kernels import qstream_reference as module
    elif module_name == "sol_reference":
        from ..kernels import sol_reference as module
    elif module_name == "int8_kv":
        from ..kernels import int8_kv as module
    else:
        raise ImportError(f"longmedia.kernels has no attention module {module_name!r}")
    return module


def _kernel_availability(module_name: str, names: tuple[str, ...], needs_triton: bool) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        if needs_triton and importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        try:
            module = _import_kernel(module_name)
        # ImportError: the kernel or triton is missing; RuntimeError: triton found no usable driver.
        except (ImportError, RuntimeError) as err:
            return False, f"longmedia.kernels.{module_name} is not importable ({type(err).__name__}: {err})"
        fn = _entry(module, names)
        if fn is None:
            return False, f"longmedia.kernels.{module_name} defines none of {', '.join(names)}"
        return True, f"longmedia.kernels.{module_name}.{fn.__name__}"
    return check


def _kernel(module_name: str, names: tuple[str, ...]) -> Callable:
    try:
        module = _import_kernel(module_name)
    except (ImportError, RuntimeError) as err:  # same reasons as the availability check
        raise BackendUnavailableError(f"longmedia.kernels.{module_name} is not importable: {err}") from err
    fn = _entry(module, names)
    if fn is None:
        raise BackendUnavailableError(f"longmedia.kernels.{module_name} defines none of {', '.join(names)}")
    return fn


# ---- factories --------------------------------------------------------------------------------

def _existing_factory(context: BuildContext) -> AttentionFn:
    if context.existing is None:
        raise BackendUnavailableError(
            "the existing backend needs ComfyUI's attention handed in as BuildContext(existing=...): "
            "build it with longmedia.comfy.patching.attention_override.existing_attention_fn(transformer_options, heads)")
    return context.existing


def _sdpa_factory(kernel: str | None) -> Callable[[BuildContext], AttentionFn]:
    def factory(context: BuildContext) -> AttentionFn:
        extra = _scale_kwargs(context)

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
            del q_offset  # exact attention does not depend on where the chunk sits
            if kernel is None:
                return merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v, **extra))
            from torch.nn.attention import SDPBackend, sdpa_kernel
            try:
                with sdpa_kernel(getattr(SDPBackend, kernel)):
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **extra)
            except RuntimeError as err:  # the pinned kernel refuses these shapes/strides/device
                if not any(phrase in str(err) for phrase in REFUSED):
                    raise
                warnings.warn(SdpaFallbackWarning(
                    f"SDPA pinned to {kernel} refused q {tuple(q.shape)} {q.dtype} strides {q.stride()}, "
                    f"k strides {k.stride()}; ran torch's own SDPA kernel choice instead"), stacklevel=2)
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **extra)
            return merge_heads(out)
        return sdpa
    return factory


def _qstream_factory(module_name: str, names: tuple[str, ...], int8: bool) -> Callable[[BuildContext], AttentionFn]:
    def factory(context: BuildContext) -> AttentionFn:
        attention = _kernel(module_name, names)
        quantize = _kernel("int8_kv", ("quantize_kv_int8",)) if int8 else None

        def qstream(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0,
                    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> torch.Tensor:
            """k/v may already be int8 with their fp32 scales [B, H, S] (what saves the K/V memory)."""
            del q_offset
            if int8 and k.dtype != torch.int8:
                k, k_scale = quantize(k)
                v, v_scale = quantize(v)
            if k.dtype == torch.int8 and (k_scale is None or v_scale is None):
                raise BackendUnavailableError("int8 k/v need k_scale and v_scale ([B, H, S] fp32)")
            out = attention(q, k, v, k_scale=k_scale, v_scale=v_scale, sm_scale=context.sm_scale)
            return merge_heads(out)
        return qstream
    return factory


def _fingerprint(t: torch.Tensor) -> tuple:
    """Where `t`'s numbers live and how they are laid out; plus its version counter where it has one.

    Inference tensors (everything ComfyUI runs, inside `torch.inference_mode()`) track no version:
    reading `_version` raises "Inference tensors do not track version counter".
    """
    version = None if t.is_inference() else t._version
    return (t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device, version)


class _SummaryMemo:
    """Sol's key-block summaries of the last k/v seen, reused while the same K/V storage comes back.

    Keyed on weak references to k's and v's storages (a new view of the same buffer hits, a new
    buffer, even at a reused address, misses: the old storage died with its buffer), their layout,
    and their version counters where the tensors have them. Inference tensors have none, so an
    in-place rewrite of a live K/V buffer between two calls cannot be seen: one memo belongs to one
    AttentionFn, built per block call (executor) or per attention call (override), and the executor
    fills a K/V buffer completely before its first attention call and never writes it afterwards.
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._value: object = None

    def get(self, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype, make: Callable[[], object]) -> object:
        key = self._key
        k_store, v_store = k.untyped_storage(), v.untyped_storage()
        facts = (_fingerprint(k), _fingerprint(v), dtype)
        if key is not None and key[0]() is k_store and key[1]() is v_store and key[2] == facts:
            return self._value
        self._key, self._value = None, None  # drop the old summaries before making new ones
        value = make()
        self._key, self._value = (weakref.ref(k_store), weakref.ref(v_store), facts), value
        return value


def _sol_factory(module_name: str, names: tuple[str, ...]) -> Callable[[BuildContext], AttentionFn]:
    def factory(context: BuildContext) -> AttentionFn:
        if context.tau is None:
            raise BackendUnavailableError("a Sol backend needs a tau: BuildContext(tau=...)")
        attention = _kernel(module_name, names)
        summarise = _entry(_import_kernel(module_name), ("sol_key_summaries",))
        memo = _SummaryMemo()

        def sol(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
            extra = {}
            if summarise is not None:  # once per K/V, not once per query chunk (what the kernel would do)
                # the kernel stores them in q's dtype; the fp32 reference makes them in fp32 (the same numbers
                # it would make itself)
                dtype = q.dtype if module_name == "sol_attention" else torch.float32
                extra["summaries"] = memo.get(k, v, dtype, lambda: summarise(k, v, block=SOL_BLOCK, dtype=dtype))
            out = attention(q, k, v, tau=context.tau, q_offset=q_offset, sink_ranges=context.sink_ranges,
                            exact_query_ranges=context.exact_query_ranges, sm_scale=context.sm_scale,
                            block=SOL_BLOCK, **extra)
            return merge_heads(out)
        return sol
    return factory


def _sol_counts(summary_bytes: int | None) -> dict[str, Callable[..., int]]:
    """A Sol backend's `workspace` (its allocations per call: kernels/sol_reference.sol_workspace_bytes, pure
    arithmetic, torch only) and `held` (the key summaries `_SummaryMemo` keeps for the AttentionFn's life).
    summary_bytes: bytes per summary element (None = q's dtype, as the Triton kernel keeps them; the fp32
    reference keeps fp32 ones)."""
    def workspace(*, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
        from ..kernels.sol_reference import sol_workspace_bytes
        return sol_workspace_bytes(heads=heads, rows=query_rows, seq_len=seq_len, head_dim=head_dim,
                                   elem_bytes=summary_bytes or dtype_bytes, block=SOL_BLOCK)

    def held(*, seq_len: int, heads: int, head_dim: int, dtype_bytes: int) -> int:
        from ..kernels.sol_reference import sol_summary_bytes
        return sol_summary_bytes(heads, seq_len, head_dim, summary_bytes or dtype_bytes, SOL_BLOCK)

    return {"workspace": workspace, "held": held}


# ---- declarations -----------------------------------------------------------------------------

def _sdpa_spec(name: str, kernel: str | None, rank: int, **fields) -> BackendSpec:
    enabled = {"CUDNN_ATTENTION": torch.backends.cuda.cudnn_sdp_enabled,
               "FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled,
               "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled,
               "MATH": torch.backends.cuda.math_sdp_enabled}.get(kernel or "")
    extra = {"CUDNN_ATTENTION": _cudnn_present, "FLASH_ATTENTION": _flash_present}.get(kernel or "")
    return BackendSpec(name=name, exact=True, factory=_sdpa_factory(kernel), speed_rank=rank,
                       availability=_sdpa_availability(kernel, enabled, extra), **fields)


def builtin_backends() -> tuple[BackendSpec, ...]:
    """Declarations of every built-in backend: exact ones fastest first (flash-attn-4 where installed, flash4.py),
    then Sol, then `existing`, then comfy-kitchen's kernels (kitchen.py; approximate, checked for the package)."""
    return (
        flash4_spec(),
        _sdpa_spec("sdpa_cudnn", "CUDNN_ATTENTION", 0, dtypes=HALF, head_dims=(32, 64, 96, 128),
                   min_capability=(9, 0),
                   description="torch SDPA pinned to cuDNN; used from Hopper on, where it was measured fastest"),
        _sdpa_spec("sdpa_flash", "FLASH_ATTENTION", 1, dtypes=HALF,
                   head_dims=(32, 64, 96, 128, 160, 192, 224, 256), min_capability=(8, 0),
                   description="torch SDPA pinned to FlashAttention-2"),
        BackendSpec(name="qstream_triton", exact=True, dtypes=FLOATS, head_dims=(32, 64, 128),
                    min_capability=(8, 0), speed_rank=2,
                    factory=_qstream_factory("qstream_attention", QSTREAM, int8=False),
                    availability=_kernel_availability("qstream_attention", QSTREAM, needs_triton=True),
                    description="our exact query-streaming Triton kernel (strided K/V, no copies)"),
        _sdpa_spec("sdpa_efficient", "EFFICIENT_ATTENTION", 3, dtypes=FLOATS, min_capability=(5, 0),
                   description="torch SDPA pinned to the memory-efficient kernel"),
        _sdpa_spec("sdpa", None, 4, dtypes=FLOATS, cpu=True, min_capability=ANY_CUDA,
                   description="torch SDPA, torch picks the kernel (fused where one supports the inputs)"),
        _sdpa_spec("sdpa_math", "MATH", 5, dtypes=FLOATS, cpu=True, min_capability=ANY_CUDA, score_bytes=8,
                   description="torch SDPA pinned to math: materialises scores and probabilities"),
        BackendSpec(name="qstream_triton_int8", exact=True, dtypes=HALF, head_dims=(32, 64, 128),
                    min_capability=(8, 0), kv_element_bytes=1, kv_scale_bytes=4, speed_rank=6,
                    factory=_qstream_factory("qstream_attention", QSTREAM, int8=True),
                    availability=_kernel_availability("qstream_attention", QSTREAM, needs_triton=True),
                    description="our exact kernel over int8 K/V with fp32 per-token-per-head scales"),
        BackendSpec(name="qstream_reference", exact=True, dtypes=FLOATS, cpu=True, min_capability=ANY_CUDA,
                    kv_element_bytes=6, score_bytes=8, speed_rank=7,
                    factory=_qstream_factory("qstream_reference", QSTREAM_REF, int8=False),
                    availability=_kernel_availability("qstream_reference", QSTREAM_REF, needs_triton=False),
                    description="eager fp32 torch reference of the exact kernel: the last exact fallback"),
        BackendSpec(name="sol", exact=False, dtypes=HALF, head_dims=(64, 128), min_capability=(8, 0),
                    speed_rank=0, takes_tau=True, factory=_sol_factory("sol_attention", SOL), **_sol_counts(None),
                    availability=_kernel_availability("sol_attention", SOL, needs_triton=True),
                    description="our block-sparse Sol kernel: approximate, routed by tau"),
        BackendSpec(name="sol_reference", exact=False, dtypes=FLOATS, cpu=True, min_capability=ANY_CUDA,
                    kv_element_bytes=6, score_bytes=8, speed_rank=2, takes_tau=True,
                    factory=_sol_factory("sol_reference", SOL_REF), **_sol_counts(4),
                    availability=_kernel_availability("sol_reference", SOL_REF, needs_triton=False),
                    description="eager fp32 torch reference of Sol: the approximate fallback"),
        BackendSpec(name="existing", exact=True, dtypes=FLOATS, cpu=True, min_capability=ANY_CUDA,
                    speed_rank=50, factory=_existing_factory,
                    description="ComfyUI's installed optimized_attention, called as it is, per query chunk"),
    ) + kitchen_backends()


def default_registry() -> BackendRegistry:
    """A fresh registry of the built-in backends (nothing is shared between calls)."""
    return BackendRegistry(builtin_backends())
