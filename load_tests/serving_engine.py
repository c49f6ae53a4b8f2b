"""The engine settings the offline benchmarks run SmolLM2 with."""

from __future__ import annotations

from typing import Any

SERVING_FIELDS: dict[str, Any] = {
    "dtype": "auto",
    "weight_quantization": "int4",
    "activation_quantization": "int8",
    "output_quantization": "int8",
    "single_thread_max_tokens": 1,
    "max_num_seqs": 16,
    "max_num_batched_tokens": 512,
    "kv_cache_memory_bytes": 128 << 20,
}
"""`smollm2-fast`'s engine section in `configs/local.yaml`, less graph mode (`EngineConfig`
fields; the benchmarks add theirs)."""
