"""DeepSeek-V4's reasoning-effort ladders: the prefix each level writes, and how OpenAI's
`reasoning_effort` values map onto them.

Source: `shared/research/deepseek-v4.md` §3.4. The encoder shipped with the weights writes the
prefix right after BOS, and only in thinking mode. Two versions exist:

- `preview` (the `encoding_dsv4.py` of the April V4-Flash/V4-Pro release, copied by vLLM's
  `vllm/tokenizers/deepseek_v4_encoding.py` and SGLang's `encoding_dsv4.py`): levels None,
  `high` and `max`; only `max` writes a prefix, the "Absolute maximum" text.
- `official` (the encoder of later checkpoints such as DeepSeek-V4-Flash-0731; SGLang calls the
  two `preview` and `official`): levels `low` (the default, no prefix), `high` (the old `max`
  text) and `max` (a new "Beyond maximum" text).

OpenAI values are mapped as DeepSeek's own API documents them (api-docs.deepseek.com, "Thinking
Mode"): `none` turns thinking off (see `options.resolve_options`); with `preview`,
`minimal`/`low`/`medium`/`high` -> `high` and `xhigh`/`max` -> `max`; with `official`,
`minimal`/`low` -> `low`, `medium`/`high` -> `high`, `xhigh`/`max` -> `max`.
"""

from __future__ import annotations

_ABSOLUTE_MAXIMUM = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n"
)
_BEYOND_MAXIMUM = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n"
)

PREFIXES: dict[str, dict[str | None, str]] = {
    "preview": {None: "", "high": "", "max": _ABSOLUTE_MAXIMUM},
    "official": {None: "", "low": "", "high": _ABSOLUTE_MAXIMUM, "max": _BEYOND_MAXIMUM},
}
"""Profile -> level -> the text written after BOS in thinking mode (None: the default level)."""

DEFAULT_PROFILE = "preview"
"""The ladder of the encoder that ships with the V4-Flash/V4-Pro weights (and vLLM's and
SGLang's default); `official` is for checkpoints whose encoder has the three-level table."""

_FROM_OPENAI: dict[str, dict[str, str]] = {
    "preview": {"minimal": "high", "low": "high", "medium": "high", "high": "high"}
    | {"xhigh": "max", "max": "max"},
    "official": {"minimal": "low", "low": "low", "medium": "high", "high": "high"}
    | {"xhigh": "max", "max": "max"},
}


def check_profile(profile: str) -> str:
    """`profile`, if it names a ladder.

    Raises:
        ValueError: an unknown profile (the message lists the known ones).
    """
    if profile not in PREFIXES:
        raise ValueError(
            f"unknown reasoning-effort profile {profile!r}; choose one of {sorted(PREFIXES)}"
        )
    return profile


def to_level(value: str, profile: str) -> str:
    """The `profile` level an OpenAI (or reference) effort value stands for.

    Args:
        value: `minimal`, `low`, `medium`, `high`, `xhigh` or `max` (`none` is handled by the
            caller: it turns thinking off).
        profile: `preview` or `official`.

    Raises:
        ValueError: a value outside that list.
    """
    table = _FROM_OPENAI[check_profile(profile)]
    if value not in table:
        raise ValueError(
            f"reasoning_effort {value!r} is not supported; use one of none, {', '.join(table)}"
        )
    return table[value]


def prefix(level: str | None, profile: str) -> str:
    """The text thinking mode writes after BOS for `level` of `profile`."""
    return PREFIXES[profile][level]
