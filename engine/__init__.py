"""Inference engine: continuous batching over a paged KV cache, on HF `transformers` models."""
