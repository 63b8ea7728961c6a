"""Import-only stand-in for PyAV (`av`) on a GPU machine without network.

The GPU image has no PyAV, and its wheel (~35 MB, ffmpeg bundled) does not fit the
64 MiB a command on the GPU machine may carry next to comfy-kitchen's CUDA kernels. ComfyUI imports
`av` at module level (comfy_api.latest._ui, _input/_input_impl video_types), so
`nodes`, `execution` and `comfy_extras.*` cannot even be imported without it.

This package satisfies those imports: every `av.<sub>` module resolves to a stub
module, every CamelCase attribute to a class that raises when used, and every
`*Error` attribute to an Exception subclass (so `except av.error.FFmpegError:` works).
Nothing here decodes or encodes media: video/audio file I/O raises ImportError.
tools/gpu/bootstrap.sh puts this folder LAST on PYTHONPATH, so a real PyAV wins.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+longmedia.stub"
LONGMEDIA_STUB = True

_MSG = "PyAV is not installed on this machine (tools/gpu/stubs/av is an import-only stand-in)"


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        def _missing(*args, **kwargs):
            raise ImportError(f"{_MSG}: {cls.__qualname__}.{name}")
        return _missing


class _Missing(metaclass=_StubMeta):
    def __init__(self, *args, **kwargs):
        raise ImportError(f"{_MSG}: {type(self).__qualname__}")


_classes = {}


def _attr(module_name, name):
    if name.startswith("__"):
        raise AttributeError(name)
    key = (module_name, name)
    if key in _classes:
        return _classes[key]
    if name.endswith("Error") or name.endswith("Exception"):
        value = type(name, (Exception,), {"__module__": module_name})
    elif name[:1].isupper():
        value = _StubMeta(name, (_Missing,), {"__module__": module_name})
    else:
        value = importlib.import_module(f"{module_name}.{name}")
    _classes[key] = value
    return value


def __getattr__(name):
    return _attr(__name__, name)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = lambda name, _n=spec.name: _attr(_n, name)
        mod.LONGMEDIA_STUB = True
        return mod

    def exec_module(self, module):
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
    sys.meta_path.append(_StubFinder())
