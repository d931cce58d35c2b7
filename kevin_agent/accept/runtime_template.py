"""The helper code written into every generated module: builds the extension on first use."""

from __future__ import annotations

_HEAD = '''
# --- kevin-agent: the CUDA extension is compiled on first use, never at import -------------
import hashlib as _kevin_hashlib
import threading as _kevin_threading
from pathlib import Path as _KevinPath

_KERNEL_DIR = _KevinPath(__file__).resolve().parent


def _extension_name(stem, parts):
    """A name derived from the sources' content, so an edited kernel builds afresh."""
    digest = _kevin_hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode("utf-8"))
        digest.update(b"\\0")
    return f"{stem}_{digest.hexdigest()[:16]}"


'''

_FILES = '''def _load_files(stem, files, **options):
    """Compile the kernel files next to this module into torch's extension cache and import them."""
    from torch.utils.cpp_extension import load

    paths = [_KERNEL_DIR / file for file in files]
    name = _extension_name(stem, [path.read_bytes() for path in paths] + [repr(sorted(options.items()))])
    return load(name=name, sources=[str(path) for path in paths], **options)


'''

_INLINE = '''def _load_inline_by_content(*args, **kwargs):
    """torch's load_inline under a content-derived name, building into torch's extension cache."""
    import inspect

    from torch.utils.cpp_extension import load_inline

    arguments = dict(inspect.signature(load_inline).bind(*args, **kwargs).arguments)
    for dropped in ("build_directory", "verbose"):
        arguments.pop(dropped, None)
    parts = [repr(sorted(arguments.items(), key=lambda item: item[0]))]
    arguments["name"] = _extension_name(str(arguments["name"]), parts)
    return load_inline(**arguments)


'''

_TAIL = '''class _LazyExtension:
    """Stands in for the compiled extension; the first attribute access builds and imports it."""

    def __init__(self, build):
        self._kevin_build = build
        self._kevin_module = None
        self._kevin_lock = _kevin_threading.Lock()

    def _kevin_load(self):
        with self._kevin_lock:
            if self._kevin_module is None:
                self._kevin_module = self._kevin_build()
            return self._kevin_module

    def __getattr__(self, attr):
        if attr.startswith("__") or "_kevin_build" not in self.__dict__:
            raise AttributeError(attr)
        return getattr(self._kevin_load(), attr)
# --- end of kevin-agent helper ----------------------------------------------------------------
'''


def runtime(*, files: bool, inline: bool) -> str:
    """The helper block, with only the loaders the module uses."""
    return _HEAD + (_FILES if files else "") + (_INLINE if inline else "") + _TAIL
