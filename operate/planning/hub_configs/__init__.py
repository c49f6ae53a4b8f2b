"""Stored `config.json` copies of hub checkpoints, for planning a deployment without its files.

`ascend-router plan` runs where the checkpoints usually are not (a laptop, CI). A deployment whose
`source.path` is not on this machine plans from a stored config when the path names one of
`HUB_CHECKPOINTS`: the hub id itself (`Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp`) or a directory of
that name (`/models/DeepSeek-V4-Flash-w8a8-mtp`; case-insensitive). The config then goes through
the engine's own reading (`engine.architectures.check_architecture`, transformers' config class)
and KV geometry (`engine.kv_layout.kv_spec`), and the parameters are counted on a meta-device
model (`operate.planning.weights`), so that no figure is restated by hand.

`deepseek-ai--DeepSeek-V4-Flash.config.json`: DeepSeek-V4-Flash's architecture fields. Sources
(the fact sheet is `shared/research/deepseek-v4.md`, section 2):

- every value is the published DeepSeek-V4-Flash(-Base) `config.json` as mirrored inline in
  alibaba/rtp-llm's V4 unit test ("Authoritative DeepSeek-V4-Flash-Base config (as published on
  HF)"), minus its `transformers_version`;
- the architecture values are also the defaults of transformers 5.24's `DeepseekV4Config`
  (`models/deepseek_v4/configuration_deepseek_v4.py`): 43 layers, `hidden_size` 4096,
  `head_dim` 512 with `qk_rope_head_dim` 64, one K=V head for 64 query heads, `q_lora_rank` 1024,
  `o_groups` 8 / `o_lora_rank` 1024, `index_n_heads` 64 / `index_head_dim` 128 / `index_topk`
  512, `sliding_window` 128, 256 routed experts (6 per token, 1 shared) of
  `moe_intermediate_size` 2048, `num_hash_layers` 3, `hc_mult` 4, `vocab_size` 129280,
  `max_position_embeddings` 1048576, `num_nextn_predict_layers` 1;
- `compress_ratios` (44 entries: 0, 0, then 4 and 128 alternating, ending 4, then the MTP
  layer's 0): 2 sliding-window-only, 21 CSA (ratio 4) and 20 HCA (ratio 128) layers, as the fact
  sheet counts them; transformers folds it into `layer_types` and drops the 44th entry.

The released checkpoints also carry `quantization_config` (FP8 with FP4 experts); it is left out
here, since the table below says how each stored checkpoint's weights are held.

`Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp` (ModelScope) is V4-Flash quantised by ModelSlim to W8A8,
with the MTP layer kept: the weights vLLM-Ascend's V4-Flash tutorial serves on one Atlas 800 A2
(8 x 64 GB) or A3 node (`docs/source/tutorials/models/DeepSeek-V4-Flash.md`; fact sheet
sections 6 and 7.4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from transformers import AutoConfig, PretrainedConfig

from engine.architectures import check_architecture

HUB_CONFIG_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class HubCheckpoint:
    """A hub checkpoint the planner knows without its files.

    Attributes:
        repo: the hub id, `owner/name`.
        config_file: the stored `config.json` copy, in this directory.
        weights: how the checkpoint holds its weights: `dtype` (all in the engine's dtype) or
            `w8a8` (ModelSlim W8A8: the decoder layers' linear weights int8, see
            `operate.planning.weights`).
    """

    repo: str
    config_file: str
    weights: Literal["dtype", "w8a8"] = "dtype"

    @property
    def config_path(self) -> Path:
        """The stored config's path."""
        return HUB_CONFIG_DIR / self.config_file

    def load_config(self) -> PretrainedConfig:
        """The stored config, read and checked as the engine reads a checkpoint's.

        Raises:
            ValueError: its `model_type` is one the engine does not serve.
        """
        data = json.loads(self.config_path.read_text())
        check_architecture(data, self.config_path)
        return AutoConfig.for_model(data.pop("model_type"), **data)


HUB_CHECKPOINTS: tuple[HubCheckpoint, ...] = (
    HubCheckpoint(
        "Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp", "deepseek-ai--DeepSeek-V4-Flash.config.json", "w8a8"
    ),
)
"""The stored checkpoints (see the module docstring for each one's sources)."""


def hub_checkpoint(path: str) -> HubCheckpoint | None:
    """The stored checkpoint that `path` (a deployment's `source.path`) names, else None: the
    hub id itself or a directory of the same name."""
    wanted = path.rstrip("/").lower()
    for hub in HUB_CHECKPOINTS:
        if wanted == hub.repo.lower() or Path(wanted).name == hub.repo.split("/")[1].lower():
            return hub
    return None
