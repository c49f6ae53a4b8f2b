"""Speculative decoding with prompt lookup (`method: ngram`).

After every sampled token the engine asks the speculator (`speculator`) for draft tokens: what
followed the earliest earlier occurrence of the sequence's last n-gram in its own prompt and
output (`ngram`). The scheduler runs the last token plus the k draft tokens as one k + 1-token
chunk of the sequence, beside plain decode and prefill rows in the same step; the sampler's
counterpart (`rejection`) keeps the longest prefix of the draft the target model agrees with,
plus one token of the target's own, and the engine rolls back the rest (`engine.llm_engine`:
the KV of rejected tokens lies past `num_computed_tokens` and the blocks holding only them go
back to the pool). `state` is the per-sequence bookkeeping, kept on the `Sequence`.
"""
