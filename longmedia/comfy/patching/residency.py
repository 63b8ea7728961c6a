"""The residency boundary run before every `prepare_sampling()` (seed-only reruns included).

It leaves the device as ComfyUI leaves it between nodes, and a little cleaner: synchronize, drop stale
prefetch queues (this aborts a malloc graph in flight), reset cast buffers, reset comfy-aimdo's VBAR watermark
limits (ComfyUI v0.39's order for these three), collect models
and registrations whose model is dead, release other models ComfyUI keeps loaded until the pass's
need is free (never the model about to be sampled), empty the allocator cache. Memory is snapshotted before and after
into a frozen `BoundaryReport` that lists every step, done or "skipped: <reason>".

Every ComfyUI / comfy-aimdo function is feature-detected: a missing one is a skipped step, never an
error, and nothing of ComfyUI's is edited or patched. A `RuntimeError` raised inside comfy-aimdo (0.6.0 raises
from `unpin`, `set_watermark` and `free_memory`, which used to fail silently) is a recorded `failed` step, logged
and reported, and the boundary goes on; any other failure of a present function is a `ResidencyBoundaryError`. `comfy` (the modules, injectable) and `reader`
(memory readings, injectable) let tests run without ComfyUI or a GPU. On a CPU device every step is
skipped and the report still comes back. `comfy` is imported lazily, inside `load_comfy_modules`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Callable

from ...report.memory import HostMemory, MemorySnapshot, Reader, ReadingFailed, read_memory

MODULE_NAMES = (
    ("model_management", "comfy.model_management"),
    ("model_prefetch", "comfy.model_prefetch"),
    ("memory_management", "comfy.memory_management"),
    ("aimdo_vbar", "comfy_aimdo.model_vbar"),
    ("aimdo_control", "comfy_aimdo.control"),
)


AIMDO_PACKAGE = "comfy_aimdo"


def raised_in_aimdo(error: BaseException) -> bool:
    """Whether `error` was raised inside comfy-aimdo (a frame of a `comfy_aimdo` module on its traceback)."""
    tb: TracebackType | None = error.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module == AIMDO_PACKAGE or module.startswith(AIMDO_PACKAGE + "."):
            return True
        tb = tb.tb_next
    return False


def aimdo_failure(function: str, error: RuntimeError) -> str:
    """The recorded reason of a comfy-aimdo call that raised."""
    return (f"{function}() raised RuntimeError inside comfy-aimdo: {error} (comfy-aimdo 0.6+ raises where older "
            "versions failed silently); recorded, not fatal")


class ResidencyBoundaryError(RuntimeError):
    """A present ComfyUI / comfy-aimdo function failed during the boundary; names the step and function."""

    def __init__(self, step: str, function: str, cause: BaseException) -> None:
        self.step = step
        self.function = function
        super().__init__(f"residency boundary step {step!r}: {function}() raised {type(cause).__name__}: {cause}. "
                         "The device state before sampling is unknown; report this with the traceback above.")


@dataclass(frozen=True)
class ComfyModules:
    """The ComfyUI and comfy-aimdo modules the boundary may call; None where not importable."""

    model_management: object | None = None
    model_prefetch: object | None = None
    memory_management: object | None = None
    aimdo_vbar: object | None = None
    aimdo_control: object | None = None
    torch_cuda: object | None = None          # the fallback for synchronize / empty_cache; None = torch.cuda

    @classmethod
    def of(cls, namespace: object) -> "ComfyModules":
        """From any namespace carrying these attribute names (missing ones are None)."""
        if isinstance(namespace, cls):
            return namespace
        names = [name for name, _ in MODULE_NAMES] + ["torch_cuda"]
        return cls(**{name: getattr(namespace, name, None) for name in names})

    @property
    def aimdo_enabled(self) -> bool:
        """Whether ComfyUI switched comfy-aimdo (dynamic VRAM) on at startup."""
        return bool(getattr(self.memory_management, "aimdo_enabled", False))


def load_comfy_modules() -> ComfyModules:
    """Import what is importable of ComfyUI and comfy-aimdo (only call this inside a ComfyUI process).

    Each import stands alone: an absent module (an older ComfyUI, no comfy-aimdo) is a skipped step.
    """
    found = {}
    try:
        import comfy.model_management
        found["model_management"] = comfy.model_management
    except ImportError:  # named reason: an absent module is a skipped step
        pass
    try:
        import comfy.model_prefetch
        found["model_prefetch"] = comfy.model_prefetch
    except ImportError:  # ComfyUI before prefetch queues
        pass
    try:
        import comfy.memory_management
        found["memory_management"] = comfy.memory_management
    except ImportError:  # ComfyUI before dynamic VRAM
        pass
    try:
        import comfy_aimdo.model_vbar
        found["aimdo_vbar"] = comfy_aimdo.model_vbar
    except ImportError:  # comfy-aimdo not installed
        pass
    try:
        import comfy_aimdo.control
        found["aimdo_control"] = comfy_aimdo.control
    except ImportError:  # comfy-aimdo not installed
        pass
    return ComfyModules(**found)


def host_memory(modules: ComfyModules) -> HostMemory:
    """comfy-aimdo's readings through `modules` (none unless ComfyUI switched it on); a RuntimeError it raises is a
    recorded `ReadingFailed`."""
    if not modules.aimdo_enabled:
        return HostMemory()
    return HostMemory(
        aimdo_usage=_aimdo_reading(modules.aimdo_control, "comfy_aimdo.control.get_total_vram_usage"),
        vbar_reclaimable=_aimdo_reading(modules.aimdo_vbar, "comfy_aimdo.model_vbar.vbars_analyze", by_device=True))


def _aimdo_reading(module: object | None, qualified: str, *, by_device: bool = False
                   ) -> Callable[..., int | None] | None:
    """`module.<function>()` (with the device's index when `by_device`) as a reading; None when absent."""
    fn = getattr(module, qualified.rsplit(".", 1)[1], None) if module is not None else None
    if not callable(fn):
        return None

    def read(*device: object) -> int | None:
        try:
            return int(fn(*(getattr(d, "index", d) for d in device)) if by_device else fn())
        except RuntimeError as error:  # named reason: comfy-aimdo 0.6+ raises instead of failing silently
            raise ReadingFailed(aimdo_failure(qualified, error)) from error

    return read


@dataclass(frozen=True)
class BoundaryAction:
    """One named step: done (through `detail`, the function called) or skipped (`detail` is the reason)."""

    name: str
    done: bool
    detail: str
    failed: bool = False  # a present comfy-aimdo call raised: not done, recorded with its reason

    @property
    def line(self) -> str:
        if self.failed:
            return f"{self.name}: failed: {self.detail}"
        return f"{self.name}: " + (f"done ({self.detail})" if self.done else f"skipped: {self.detail}")


@dataclass(frozen=True)
class BoundaryReport:
    """Memory before and after the boundary and every step, in order."""

    device: str
    before: MemorySnapshot
    after: MemorySnapshot
    actions: tuple[BoundaryAction, ...]

    @property
    def done(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if a.done)

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if not a.done and not a.failed)

    @property
    def failed(self) -> tuple[str, ...]:
        """Steps (and readings) where comfy-aimdo raised; each is in `lines` with its reason."""
        return tuple(a.name for a in self.actions if a.failed)

    @property
    def released_reserved_bytes(self) -> int:
        """What the boundary handed back from torch's cache (0 off CUDA)."""
        return (self.before.reserved_bytes or 0) - (self.after.reserved_bytes or 0)

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(a.line for a in self.actions)


STEPS = ("synchronize", "cleanup_prefetch_queues", "reset_cast_buffers", "reset_vbar_watermarks",
         "collect_dead_models", "drop_dead_registrations", "release_other_models", "empty_cache")
"""In order. cleanup_prefetch_queues -> reset_cast_buffers -> reset_vbar_watermarks is ComfyUI v0.39's order: the
first aborts a malloc graph still recording, before the cast buffers it may hold are reset."""


def _entries_of(mm: object, keep: object) -> list:
    """ComfyUI's LoadedModel entries of the model about to be sampled (`keep`, its clones and its parent)."""
    out = []
    for loaded in list(getattr(mm, "current_loaded_models", None) or ()):
        patcher = getattr(loaded, "model", None)
        if patcher is None:
            continue
        same = getattr(patcher, "is_clone", None)
        if patcher is keep or (callable(same) and same(keep)):
            out.append(loaded)
    return out


class _Run:
    """Runs the steps of one boundary and records them."""

    def __init__(self) -> None:
        self.actions: list[BoundaryAction] = []

    def skip(self, name: str, reason: str) -> None:
        self.actions.append(BoundaryAction(name, False, reason))

    def call(self, name: str, module: object | None, module_name: str, function: str, *args) -> bool:
        """Call `module.function(*args)` when present; True when it ran."""
        fn = getattr(module, function, None) if module is not None else None
        qualified = f"{module_name}.{function}"
        if module is None:
            self.skip(name, f"{module_name} is not importable")
            return False
        if not callable(fn):
            self.skip(name, f"{qualified} is absent in this install")
            return False
        try:
            fn(*args)
        except RuntimeError as exc:  # named reason: comfy-aimdo 0.6+ raises (recorded); anything else re-raised
            if not (module_name.startswith(AIMDO_PACKAGE) or raised_in_aimdo(exc)):
                raise ResidencyBoundaryError(name, qualified, exc) from exc
            self.fail(name, aimdo_failure(qualified, exc))
            return False
        except Exception as exc:  # named reason: re-raised with the step and function named
            raise ResidencyBoundaryError(name, qualified, exc) from exc
        self.actions.append(BoundaryAction(name, True, qualified))
        return True

    def fail(self, name: str, reason: str) -> None:
        """Record a step comfy-aimdo failed (logged too: never silent)."""
        logging.warning("LongMedia residency boundary: %s: %s", name, reason)
        self.actions.append(BoundaryAction(name, False, reason, failed=True))

    def readings(self, when: str, snapshot: MemorySnapshot) -> None:
        for reason in snapshot.failures:
            self.actions.append(BoundaryAction(f"read_memory_{when}", False, reason, failed=True))

    def fallback(self, name: str, qualified: str, fn: Callable[[], object]) -> None:
        """Replace the skipped step `name` by torch's own call, noting why ComfyUI's was not used. After a failed
        step (comfy-aimdo raised inside ComfyUI's) torch's call still runs and the failure stays recorded."""
        if self.actions[-1].failed:
            fn()
            return
        skipped = self.actions.pop()
        fn()
        self.actions.append(BoundaryAction(name, True, f"{qualified}, because {skipped.detail}"))


def residency_boundary(*, device, reader: Reader | None = None, comfy: object | None = None,
                       keep: object | None = None, memory_required: int | None = None) -> BoundaryReport:
    """Release what a previous run left behind on `device`, before `prepare_sampling()`; report what was done.

    keep / memory_required: the ModelPatcher about to be sampled and the bytes its pass needs free (the
    plan's peak and reserve). Other models ComfyUI keeps loaded on the device are then released through
    `model_management.free_memory(memory_required, device, keep_loaded=<keep's entries>)` until that much is
    free: ComfyUI's own rule, which never unloads the kept model. Without them the step is skipped.

    `comfy`: a namespace with `model_management`, `model_prefetch`, `memory_management`, `aimdo_vbar`
    (comfy_aimdo.model_vbar) and `aimdo_control` (comfy_aimdo.control); missing attributes are absent
    APIs. None imports them (inside ComfyUI). `reader(device) -> MemorySnapshot`; None reads torch.
    """
    import torch

    dev = torch.device(device)
    modules = ComfyModules.of(comfy) if comfy is not None else (load_comfy_modules() if dev.type == "cuda"
                                                                 else ComfyModules())
    host = host_memory(modules) if dev.type == "cuda" else HostMemory()
    read = reader if reader is not None else (lambda d: read_memory(d, host))
    before = read(dev)
    run = _Run()
    if dev.type != "cuda":
        for name in STEPS:
            run.skip(name, f"device {dev} has no accelerator memory to manage")
        return BoundaryReport(str(dev), before, read(dev), tuple(run.actions))

    mm, mm_name = modules.model_management, "comfy.model_management"
    cuda = modules.torch_cuda if modules.torch_cuda is not None else torch.cuda
    run.readings("before", before)
    if not run.call("synchronize", mm, mm_name, "synchronize"):
        run.fallback("synchronize", "torch.cuda.synchronize", lambda: cuda.synchronize(dev))
    run.call("cleanup_prefetch_queues", modules.model_prefetch, "comfy.model_prefetch", "cleanup_prefetch_queues")
    run.call("reset_cast_buffers", mm, mm_name, "reset_cast_buffers")
    if modules.aimdo_vbar is None:
        run.skip("reset_vbar_watermarks", "comfy_aimdo.model_vbar is not importable")
    elif not modules.aimdo_enabled:
        run.skip("reset_vbar_watermarks", "comfy-aimdo is not active (comfy.memory_management.aimdo_enabled is off)")
    else:
        run.call("reset_vbar_watermarks", modules.aimdo_vbar, "comfy_aimdo.model_vbar", "vbars_reset_watermark_limits")
    run.call("collect_dead_models", mm, mm_name, "cleanup_models_gc")
    run.call("drop_dead_registrations", mm, mm_name, "cleanup_models")
    if keep is None or memory_required is None:
        run.skip("release_other_models", "no model and memory requirement given")
    else:
        run.call("release_other_models", mm, mm_name, "free_memory", int(memory_required), dev,
                 _entries_of(mm, keep))
    if not run.call("empty_cache", mm, mm_name, "soft_empty_cache"):
        run.fallback("empty_cache", "torch.cuda.empty_cache", cuda.empty_cache)
    after = read(dev)
    run.readings("after", after)
    return BoundaryReport(str(dev), before, after, tuple(run.actions))
