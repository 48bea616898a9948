"""Stand-in torchvision for the SGLang engine target (not torchvision).

SGLang's config package and transformers' image utilities import torchvision; PyPI's
torchvision would replace the session's CPU torch with a CUDA build. Here every submodule
imports and every name is a placeholder class that refuses to be made, naming itself;
``InterpolationMode`` and ``ImageReadMode`` carry the members imported at module level.
"""

import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+conformance.standin"
__standin__ = True


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    RGB = 3


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


KNOWN = {"ImageReadMode": ImageReadMode, "InterpolationMode": InterpolationMode}


def _placeholder(module, name):
    def refuse(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stand-in: {module}.{name} is not provided")

    return type(name, (), {"__init__": refuse, "__module__": module})


def _getattr_of(module):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return KNOWN.get(name) or _placeholder(module, name)

    return __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``torchvision.*`` module (``transforms.v2``, ``io``, ...) as a placeholder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _getattr_of(spec.name)
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Submodules())
__getattr__ = _getattr_of(__name__)
