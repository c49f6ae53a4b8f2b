"""docs/settings.md is the generator's output for the config models as they are now."""

from __future__ import annotations

from pydantic import BaseModel, Field

from configs.engine_config import EngineConfig
from configs.lora_config import LoraConfig
from operate.settings_doc import DOC_PATH, REGENERATE, missing_descriptions, render, sections


def test_settings_reference_is_current() -> None:
    assert DOC_PATH.exists() and DOC_PATH.read_text() == render(), (
        f"docs/settings.md is stale: the config models changed; run `{REGENERATE}` and commit "
        "the result"
    )


def test_every_setting_has_a_description() -> None:
    assert missing_descriptions() == [], (
        "give these fields a Field(description=...) in configs/ (units, default's meaning, "
        f"what goes wrong), then run `{REGENERATE}`"
    )


def test_nested_sections_follow_their_parent_with_their_yaml_paths() -> None:
    found = {s.model: s for s in sections()}
    assert found[EngineConfig].path == "models[].engine"
    assert found[LoraConfig].path == "models[].engine.lora"
    paths = [s.path for s in sections()]
    assert (
        paths.index("models[].engine") < paths.index("models[].engine.lora") < paths.index("policy")
    )


class _Inner(BaseModel):
    """Inner settings."""

    size: int = Field(3, gt=0, description="How many.")


class _Outer(BaseModel):
    """Outer settings."""

    inner: dict[str, _Inner] = Field(default_factory=dict)
    bare: int = 1


def test_a_field_without_description_is_listed_and_nested_models_lend_their_docstring() -> None:
    assert missing_descriptions(_Outer) == ["bare"]
    text = render(_Outer)
    assert "| `inner` | map str → [_Inner](#inner-name) | `{}` | Inner settings. |" in text
    assert "| `size` | int (> 0) | `3` | How many. |" in text
