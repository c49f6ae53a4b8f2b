"""Natural-text prompts for speculative-decoding benchmarks, shared by `spec_decode_bench` and
the `copy-heavy` / `free-gen` presets of `load_tests.compare`.

- `copy`: "<a ~240-token text>\\n\\nRepeat the text above exactly." (prompt lookup's best case:
  the answer is in the prompt);
- `free`: an open question whose answer the prompt does not contain (few n-gram matches).

Each is a user message; the server (or `spec_decode_bench`) applies the chat template.
`text_message` varies the message per request (a numbered header, and for `free` the topic) so
that no prompt cache answers a later request, while keeping the text that is copied the same.
"""

from __future__ import annotations

import random
from typing import Literal

TextWorkload = Literal["copy", "free"]
TEXT_WORKLOADS: tuple[TextWorkload, ...] = ("copy", "free")

COPY_TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a small "
    "brass lamp and a notebook bound in faded green cloth. In the notebook he recorded the "
    "direction of the wind, the height of the waves, the names of the ships that passed, and "
    "anything else that caught his attention: a flock of gulls circling the rocks, a fishing "
    "boat that returned too late, the smell of rain long before the first drop fell. He had "
    "kept these records for thirty-one years, and the shelves of his narrow kitchen were lined "
    "with notebooks of the same green cloth, each one labelled with the year in careful black "
    "ink. Visitors from the village sometimes asked him why he bothered, since the harbour "
    "office kept its own logs and the weather service published forecasts twice a day. He "
    "would smile and answer that the sea never repeats itself exactly, and that somebody ought "
    "to notice the small differences. On stormy nights he stayed awake until morning, watching "
    "the beam sweep across the black water, counting the seconds between the flashes and the "
    "thunder. When the storm finally passed, he would write a single line at the bottom of "
    "the page: the light stayed on, and everyone came home."
)
"""About 250 words of plain prose (~240 tokens with SmolLM2's tokenizer; ~280 as the copy
workload's chat-templated prompt)."""

COPY_MESSAGE = COPY_TEXT + "\n\nRepeat the text above exactly."
"""The copy workload's user message."""

FREE_TOPICS = (
    "a girl who builds a robot",
    "a baker who opens a shop on the moon",
    "two brothers who sail around the world",
    "a dragon who is afraid of the dark",
    "an old clock that starts running backwards",
    "a village that wakes up under the sea",
)
"""Topics of the free workload; the first is `spec_decode_bench`'s question."""


def free_message(topic: str = FREE_TOPICS[0]) -> str:
    """The free workload's user message about `topic`."""
    return f"Write a long story about {topic}, in five paragraphs."


def text_message(kind: TextWorkload, rng: random.Random) -> str:
    """One request's user message of workload `kind`, made distinct by `rng`'s draws.

    Raises:
        ValueError: unknown `kind`.
    """
    n = rng.randrange(1_000_000)
    if kind == "copy":
        return f"Document {n}.\n\n{COPY_MESSAGE}"
    if kind == "free":
        return f"Story {n}. {free_message(rng.choice(FREE_TOPICS))}"
    raise ValueError(f"text workload {kind!r}: expected one of {TEXT_WORKLOADS}")
