"""Where a checkpoint's files are: a GGUF file, or a Hugging Face checkpoint directory.

Its own module so that the loaders of both the model (`engine.model_loader`) and its quantised
weights (`engine.quantization.loader`) can name it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.json_file import read_json_object

SAFETENSORS_INDEX = "model.safetensors.index.json"
"""Index of a sharded safetensors checkpoint (`weight_map`: tensor name -> shard file)."""


@dataclass(frozen=True)
class CheckpointRef:
    """Where a checkpoint's files are.

    Attributes:
        directory: the folder passed to `from_pretrained`.
        gguf_file: file name inside `directory` for GGUF checkpoints, else None.
        origin: the GGUF file that `directory` was converted from (`engine.gguf_cache`); the
            config's checks name it. None for a checkpoint read where it is.
    """

    directory: Path
    gguf_file: str | None
    origin: Path | None = None

    @classmethod
    def from_path(cls, path: str | Path) -> CheckpointRef:
        """Resolve a `.gguf` file or a checkpoint directory.

        Raises:
            ValueError: the path does not exist, or a directory lacks `config.json`.
        """
        p = Path(path).expanduser()
        if not p.exists():
            raise ValueError(f"checkpoint path {str(p)!r} does not exist")
        if p.is_file():
            if p.suffix != ".gguf":
                raise ValueError(f"checkpoint file {str(p)!r} is not a .gguf file")
            return cls(p.parent, p.name)
        if not (p / "config.json").is_file():
            raise ValueError(f"checkpoint directory {str(p)!r} has no config.json")
        return cls(p, None)

    def kwargs(self) -> dict[str, str]:
        """Extra keyword arguments for transformers' `from_pretrained`."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}

    @property
    def from_gguf(self) -> bool:
        """A GGUF file, read directly or through its converted directory (`origin`)."""
        return self.gguf_file is not None or self.origin is not None

    @property
    def config_file(self) -> Path:
        """The file the model config comes from (`config.json`, or the GGUF file)."""
        return self.directory / (self.gguf_file or "config.json")

    def weight_file(self, tensor: str) -> Path:
        """The file holding `tensor`: its shard per the safetensors index, else the one file."""
        if self.gguf_file:
            return self.directory / self.gguf_file
        index = self.directory / SAFETENSORS_INDEX
        if index.is_file():
            shard = read_json_object(index).get("weight_map", {}).get(tensor)
            if shard:
                return self.directory / shard
        return self.directory / "model.safetensors"
