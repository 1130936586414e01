"""Import-only stand-in for torchvision in the sglang client venv (tools/compat/run.sh).

sglang's ``bench_serving`` imports its server configs, which import multimodal helpers that
import torchvision at module level; the client never calls them, and PyPI's torchvision does
not load beside the CPU torch build here. Every attribute and submodule is a placeholder that
raises only when called."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _Placeholder:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> _Placeholder:
        return _Placeholder(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a placeholder (torchvision is not installed)")

    def __mro_entries__(self, bases):
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self.__name__}.{item}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


sys.meta_path.insert(0, _Finder())
__version__ = "0.0.0+placeholder"
__path__ = __path__  # noqa: PLW0127 - a package, so submodules resolve through the finder


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    return _Placeholder(f"torchvision.{item}")
