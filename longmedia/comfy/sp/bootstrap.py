"""The first code a spawned sequence-parallel worker runs (through `runpy.run_path`, a target any Python can
unpickle), before anything of the pack can be imported by name.

ComfyUI imports a custom node pack under a module name of its own (the pack folder's path), which a fresh
process cannot import. So the worker registers the pack's package under that same name, from the same folder,
as ComfyUI's loader does (`spec_from_file_location`), and then calls `sp.ranks.worker_main` by its full name.
Where the pack is importable as a top-level package (tests, tools), nothing is registered. Reads
`WORKER_MODULE`, `PACK_NAME`, `PACK_ROOT` and `WORKER_ARGS` from the globals `run_path` hands it.
"""

import importlib
import importlib.util
import os
import sys


def _register_pack(name, root):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _run(worker_module, pack_name, pack_root, worker_args):
    if pack_name and pack_name not in sys.modules:
        _register_pack(pack_name, pack_root)
    importlib.import_module(worker_module).worker_main(*worker_args)


if __name__ == "__longmedia_sp_worker__":  # run by runpy.run_path in a spawned worker, never on import
    _run(globals()["WORKER_MODULE"], globals()["PACK_NAME"], globals()["PACK_ROOT"], globals()["WORKER_ARGS"])
