"""Fixtures for the op tests (CPU only, no torch_npu needed)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import fake_torch_npu
import fake_torch_npu_util
import pytest


@pytest.fixture
def fake_torch_npu_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """Install the recording `torch_npu` stand-in for one test; calls start empty."""
    fake_torch_npu_util.CALLS.clear()
    module = fake_torch_npu.make_module()
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    yield module
    fake_torch_npu_util.CALLS.clear()
