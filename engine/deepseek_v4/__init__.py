"""DeepSeek-V4 on the paged engine: its hybrid KV cache (`cache`), the per-step indices into it
(`step_indices`) and its attention over them (`attention`)."""
