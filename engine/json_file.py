"""Reading the JSON files that sit beside a checkpoint (config, shard index, quant description)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path, expected: str = "a JSON object") -> dict[str, Any]:
    """The JSON object stored at `path`.

    Raises:
        ValueError: one line naming `path`: unreadable, not JSON, or not an object (`expected`
            says what should have been there).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from exc
    if isinstance(data, dict):
        return data
    raise ValueError(f"{path}: expected {expected}")
