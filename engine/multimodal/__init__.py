"""Images and audio in the prompt: media items, their encoders, and how their embeddings enter
prefill (Qwen2.5-VL, Qwen2-Audio)."""
