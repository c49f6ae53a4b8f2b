"""Lazy access to the `torch_npu` module (installed on Ascend hosts only)."""

from __future__ import annotations

import importlib
from types import ModuleType


def torch_npu() -> ModuleType:
    """The `torch_npu` module, imported on first use (a `sys.modules` lookup afterwards).

    Raises:
        ModuleNotFoundError: `torch_npu` is not installed (not an Ascend host).
    """
    return importlib.import_module("torch_npu")
