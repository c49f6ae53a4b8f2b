"""Incremental detokenisation (multi-byte safe) and stop strings (no leaks)."""

from __future__ import annotations

import random

import pytest

from deployments.streaming.detokenizer import IncrementalDetokenizer
from deployments.streaming.stop_strings import StopStringMatcher

TEXTS = [
    "你好，世界。今天天气很好，我们去公园散步吧。",
    "Emoji: 👩‍👩‍👧‍👦 🇫🇷 🎉 done",
    "def f(x):\n    return x ** 2  # 平方",
    "Ünïcödé çåfé — naïve résumé",
]


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_deltas_join_to_the_text(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, prefix_ids=tokenizer.encode("Say: "))
    deltas = [detok.push([t]) for t in ids] + [detok.flush()]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tokenizer.decode(ids)


def test_cut_inside_a_character_flushes_replacement_at_end(tokenizer) -> None:
    ids = tokenizer.encode("好", add_special_tokens=False)
    assert len(ids) > 1, "needs a character spread over several byte tokens"
    detok = IncrementalDetokenizer(tokenizer)
    assert detok.push(ids[:1]) == ""
    assert detok.flush() == "\ufffd"


def _feed(matcher: StopStringMatcher, text: str, rng: random.Random) -> str:
    out, i = [], 0
    while i < len(text) and not matcher.stopped:
        n = rng.randint(1, 4)
        out.append(matcher.push(text[i : i + n]))
        i += n
    if not matcher.stopped:
        out.append(matcher.flush())
    return "".join(out)


@pytest.mark.parametrize("seed", range(20))
def test_stop_string_never_leaks_and_held_text_is_flushed(seed: int) -> None:
    rng = random.Random(seed)
    assert _feed(StopStringMatcher([" D E F G"]), "A B C D E F G H", rng) == "A B C"
    assert _feed(StopStringMatcher(["TRE\nAAAA"]), "UNO DUE TRE", rng) == "UNO DUE TRE"
    assert _feed(StopStringMatcher(["Obs", "xyz"]), "thought Observation", rng) == "thought "


def test_stream_prefix_of_stop_is_held_back() -> None:
    m = StopStringMatcher(["STOP"])
    assert m.push("abc ST") == "abc "
    assert m.push("O") == ""
    assert m.push("x") == "STOx"
