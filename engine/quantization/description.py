"""`quant_model_description.json`: which tensor of a ModelSlim checkpoint is quantised how.

The file maps every tensor name to its quantisation type (`FLOAT`, `W8A8`, `W8A8_DYNAMIC`, ...)
next to a few global fields (`model_quant_type`, `version`, `kv_quant_type`, ...). A quantised
linear layer is named by its `<layer>.weight` entry; its extra tensors (`input_scale`,
`weight_scale`, ...) carry the same type. Source: msModelSlim
docs/en/feature_guide/quick_quantization_v1/quantization_result.md ("File Structure Example",
"Quantization Type Enumerated Values") and vllm-ascend
vllm_ascend/quantization/modelslim_config.py (`MODELSLIM_CONFIG_FILENAME`,
`get_linear_quant_type`: the type of layer `p` is `description[p + ".weight"]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.json_file import read_json_object

QUANT_DESCRIPTION_FILE = "quant_model_description.json"
"""The description file ModelSlim writes next to the quantised weights."""

FLOAT = "FLOAT"
W8A8 = "W8A8"
W8A8_DYNAMIC = "W8A8_DYNAMIC"
LINEAR_TYPES = (W8A8, W8A8_DYNAMIC)
"""Linear-layer quantisation types this engine runs."""

GLOBAL_FIELDS = frozenset(
    {
        "model_quant_type",
        "version",
        "group_size",
        "kv_quant_type",
        "kv_cache_type",
        "fa_quant_type",
        "reduce_quant_type",
        "metadata",
        "optional",
    }
)
"""Keys of the file that describe the model, not a tensor."""

KV_CACHE_FIELDS = ("kv_quant_type", "kv_cache_type", "fa_quant_type")
"""Global fields that announce int8 KV-cache/attention scales, which this engine ignores."""


@dataclass(frozen=True)
class QuantDescription:
    """A parsed description file.

    Attributes:
        path: the file it came from (named in errors).
        model_quant_type: the global `model_quant_type` (e.g. `W8A8_DYNAMIC`), or None.
        tensor_types: tensor name -> quantisation type, global fields excluded.
        kv_cache_quant: the KV-cache/attention quantisation fields present (name -> value).
    """

    path: Path
    model_quant_type: str | None
    tensor_types: dict[str, str]
    kv_cache_quant: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> QuantDescription:
        """Parse `path`.

        Raises:
            ValueError: (naming the file) not a JSON object, or a tensor entry whose type is
                not a string.
        """
        data = read_json_object(path, "a JSON object of tensor name -> quant type")
        types = {k: v for k, v in data.items() if k not in GLOBAL_FIELDS}
        bad = [k for k, v in types.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"{path}: entry {bad[0]!r} must be a quant type string")
        kv = {k: data[k] for k in KV_CACHE_FIELDS if data.get(k)}
        return cls(path, data.get("model_quant_type"), types, kv)

    def quantised_layers(self) -> dict[str, str]:
        """Layer name -> type for every `<layer>.weight` entry whose type is not `FLOAT`.

        Besides linear layers this can name modules whose float weight ModelSlim rewrote and
        tagged with the model's type (smoothed norms); the loader tells them apart.

        Raises:
            ValueError: a layer has a type this engine does not run (the message names the
                tensor, its type and the supported ones).
        """
        layers = {}
        for name, qtype in self.tensor_types.items():
            if not name.endswith(".weight") or qtype == FLOAT:
                continue
            if qtype not in LINEAR_TYPES:
                raise ValueError(
                    f"{self.path}: {name} is quantised as {qtype!r}, which this engine does not "
                    f"run; supported: {', '.join((FLOAT, *LINEAR_TYPES))}"
                )
            layers[name.removesuffix(".weight")] = qtype
        return layers
