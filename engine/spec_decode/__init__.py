"""Speculative decoding: prompt lookup (`ngram`), a draft model (`draft`), DeepSeek MTP (`mtp`).

After every step the engine hands the speculator (`speculator`, `Speculator.follow_step`) the
step and the sequences that sampled; it picks those that may speculate and how many tokens, and
the proposer drafts them: `ngram` (what followed the earliest earlier occurrence of the
sequence's last n-gram) or `model_proposer` (greedy tokens of a draft model or of the MTP layer,
`mtp_model` for DeepSeek-V3, `mtp_v4` for DeepSeek-V4's `mtp.0.*`, read by `mtp_v4_weights` and
run as a drafter by `mtp_v4_draft`; they keep a KV cache of their own on the target's block
tables, V4's on its sliding-window tables too). The scheduler runs the last token plus the k
draft tokens as one k + 1-token chunk of the sequence, beside plain decode and prefill rows in
the same step; the sampler's counterpart (`rejection`, through `Speculator.verify`) keeps the
longest prefix of the draft the target model agrees with, plus one token of the target's own,
and the engine rolls back the rest (`engine.postprocess`: the KV of rejected tokens lies past
`num_computed_tokens` and the blocks holding only them go back to the pool). `state` is the
per-sequence bookkeeping, kept on the `Sequence`; `build` makes the speculator for the
configured method.
"""
