"""LongMedia core: ComfyUI-free planning and exact streamed execution for MiniMax H3.

Nothing here imports ComfyUI at module level; the adapters that talk to ComfyUI
import `comfy` lazily inside functions.
"""

import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"


def _attach_source_kernels() -> None:
    """Make `kernels/` (beside this package in a source checkout) importable as `<this package>.kernels`.

    A wheel installs it there through pyproject's package-dir; a ComfyUI custom_nodes/ checkout or the
    repository itself has it one folder up, which a plain relative import cannot reach. Nothing is
    imported from it here: its __init__ only defines helpers, the Triton modules load on first use.
    """
    name = f"{__name__}.kernels"
    here = Path(__file__).resolve().parent
    source = here.parent / "kernels" / "__init__.py"
    if name in sys.modules or (here / "kernels").is_dir() or not source.is_file():
        return
    spec = importlib.util.spec_from_file_location(name, source, submodule_search_locations=[str(source.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_attach_source_kernels()
