"""Engine factories on the real SmolLM2 checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine


@pytest.fixture(scope="session")
def make_engine(smollm2_path: str) -> Callable[..., LLMEngine]:
    """Build an engine with overridden `EngineConfig` fields (fp32, small cache by default)."""

    def make(**overrides: Any) -> LLMEngine:
        fields: dict[str, Any] = {"dtype": "float32", "max_model_len": 1024, "num_kv_blocks": 128}
        fields.update(overrides)
        return LLMEngine(smollm2_path, EngineConfig(**fields))

    return make
