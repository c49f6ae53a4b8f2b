"""Hypothesis strategies of request bodies for fuzzing the request path: OpenAI's
`/v1/chat/completions` and `/v1/completions`, Anthropic's `/v1/messages` and
`/v1/messages/count_tokens`, OpenAI's `/v1/responses`.

A base body is drawn from the endpoint's request model's own JSON Schema
(`ChatCompletionRequest`, `CompletionRequest`, `MessagesRequest`, `CountTokensRequest`,
`ResponsesRequest`) through `load_tests.fuzz_schema` (the schema adapted so that examples stay
cheap and realistic), or for the Messages and Responses APIs half the time is one of the
hand-written bodies of `load_tests.fuzz_agent_bodies` (tools, tool calls and results, streams).
Every valid body gets an output limit of 1..4 tokens (`max_tokens`, `max_output_tokens`) and a
served model id (or no `model` where the API allows it), so serving one costs little.

Most examples (>= 80 %) are then made invalid by one of the mutators of
`load_tests.fuzz_mutators`. Each example is sent as raw `bytes` (deep nesting cannot go through
Python's recursive `json`), with `expected_invalid` computed locally by the router's own edge
checks (`load_tests.fuzz_verdict.local_verdict`).
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from load_tests.fuzz_agent_bodies import (
    MESSAGES_BODIES,
    RESPONSES_BODIES,
    realistic,
    repair_messages,
    repair_responses,
)
from load_tests.fuzz_bodies import Mutator
from load_tests.fuzz_mutators import MUTATORS, mutate_extra_fields
from load_tests.fuzz_schema import (
    ANTHROPIC_OVERRIDES,
    OPENAI_OVERRIDES,
    RESPONSES_OVERRIDES,
    adapt_schema,
    schema_strategy,
)
from load_tests.fuzz_verdict import PATHS, Endpoint, Request, local_verdict
from router.apis.anthropic.protocol import CountTokensRequest, MessagesRequest
from router.apis.responses.protocol import ResponsesRequest

SCHEMAS: dict[Endpoint, tuple[type[BaseModel], Mapping[str, dict[str, Any]]]] = {
    "chat": (ChatCompletionRequest, OPENAI_OVERRIDES),
    "completions": (CompletionRequest, OPENAI_OVERRIDES),
    "messages": (MessagesRequest, ANTHROPIC_OVERRIDES),
    "count_tokens": (CountTokensRequest, ANTHROPIC_OVERRIDES),
    "responses": (ResponsesRequest, RESPONSES_OVERRIDES),
}
"""Endpoint -> (request model, the schema overrides its bodies are drawn with)."""
OPENAI_ENDPOINTS: tuple[Endpoint, ...] = ("chat", "chat", "chat", "completions")
AGENT_ENDPOINTS: tuple[Endpoint, ...] = (
    "messages",
    "responses",
    "count_tokens",
    "messages",
    "responses",
)
"""The APIs coding agents speak (Claude Code, Codex), weighted by repetition."""
CHEAP_MAX_TOKENS = 4
UNMUTATED_SHARE = 0.05
EXTRA_FIELDS_ONLY_SHARE = 0.02
SECOND_MUTATOR_SHARE = 0.35
REJECTED_MAX_TOKENS = 2**31
"""An output limit this large exceeds every context, so the router refuses it unserved."""


@dataclass(frozen=True)
class FuzzExample:
    """One request to send.

    Attributes:
        endpoint: Which API (`PATHS` names its route).
        body: The exact HTTP body.
        mutators: The mutator families applied, primary first; empty for an unmutated body.
        expected_invalid: The router's own edge checks refuse the body (computed locally).
        reason: Why it is invalid (the local error message), else "".
    """

    endpoint: Endpoint
    body: bytes
    mutators: tuple[str, ...]
    expected_invalid: bool
    reason: str = ""

    @property
    def path(self) -> str:
        """The route to POST to."""
        return PATHS[self.endpoint]

    @property
    def family(self) -> str:
        """The primary mutator family (see `classify`)."""
        return classify(self)

    def preview(self, limit: int = 600) -> str:
        """The body as text, cut to `limit` characters (with its total size when cut)."""
        text = self.body[:limit].decode("utf-8", errors="backslashreplace")
        more = f"... ({len(self.body)} bytes)" if len(self.body) > limit else ""
        return text + more


def classify(example: FuzzExample) -> str:
    """The mutator family of an example, for reporting: its primary mutator, or `valid_base`."""
    return example.mutators[0] if example.mutators else "valid_base"


def _cheap(endpoint: Endpoint, request: Request) -> bool:
    if endpoint == "count_tokens":  # counted, never generated
        return True
    limit = request.output_limit()
    return limit is not None and (limit <= CHEAP_MAX_TOKENS or limit >= REJECTED_MAX_TOKENS)


def _set_output_limit(body: dict[str, Any], endpoint: Endpoint, tokens: int) -> None:
    """The endpoint's output limit set to `tokens` (count_tokens has none)."""
    if endpoint == "responses":
        body["max_output_tokens"] = tokens
    elif endpoint != "count_tokens":
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = tokens


@lru_cache(maxsize=None)
def _schema_strategy(endpoint: Endpoint) -> st.SearchStrategy[dict[str, Any]]:
    model, overrides = SCHEMAS[endpoint]
    return schema_strategy(adapt_schema(model.model_json_schema(), overrides))


def _repair_tool_choice(draw: st.DrawFn, body: dict[str, Any]) -> None:
    names = [t["function"]["name"] for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if names:
            choice["function"]["name"] = draw(st.sampled_from(names))
        else:
            body.pop("tool_choice")
    elif choice == "required" and not names:
        body["tool_choice"] = "auto"


@st.composite
def base_bodies(draw: st.DrawFn, endpoint: Endpoint, models: Sequence[str]) -> dict[str, Any]:
    """A schema-drawn (or for the agent APIs, half the time a hand-written) body, made
    valid-ish and cheap: an output limit of 1..4 tokens, a served model, or none where `model`
    is optional.

    Args:
        endpoint: Which API's body.
        models: Served model ids.
    """
    if endpoint in AGENT_ENDPOINTS and draw(st.booleans()):
        body = realistic(draw, endpoint)
    else:
        body = copy.deepcopy(draw(_schema_strategy(endpoint)))
        if endpoint == "chat":
            _repair_tool_choice(draw, body)
        elif endpoint == "responses":
            repair_responses(draw, body)
        elif endpoint != "completions":
            repair_messages(draw, body)
    _set_output_limit(body, endpoint, draw(st.integers(1, CHEAP_MAX_TOKENS)))
    optional = endpoint not in ("messages", "count_tokens")
    model = draw(st.sampled_from([*models, None] if optional else list(models)))
    body.pop("model", None)
    if model is not None:
        body["model"] = model
    if endpoint == "chat" and draw(st.booleans()):  # as clients send: a plain user turn last
        body["messages"] = [{"role": "user", "content": draw(st.sampled_from(["Hi", "2+2?"]))}]
    return body


def _serialize(body: dict[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def mutation_rng(draw: st.DrawFn, base: dict[str, Any]) -> random.Random:
    """The seeded `Random` that picks and drives the mutators of one example.

    hypothesis draws 0 far more often than uniformly (its integers, `randoms()`, and often a
    whole zeroed example), which would pin every choice to the first option. Mixing drawn bits
    with a hash of the base body spreads the choices evenly and stays reproducible.
    """
    bits = draw(st.randoms(use_true_random=False)).getrandbits(32)
    return random.Random(bits ^ zlib.crc32(json.dumps(base, sort_keys=True).encode()))


def pick_mutators(rng: random.Random, endpoint: Endpoint) -> list[tuple[str, Mutator]]:
    """None (`UNMUTATED_SHARE`), `extra_fields` alone, or one or two weighted families."""
    roll = rng.random()
    if roll < UNMUTATED_SHARE:
        return []
    if roll < UNMUTATED_SHARE + EXTRA_FIELDS_ONLY_SHARE:
        return [("extra_fields", mutate_extra_fields)]
    names = [name for name, (_, _, eps) in MUTATORS.items() if endpoint in eps]
    weights = [MUTATORS[name][1] for name in names]
    count = 2 if rng.random() < SECOND_MUTATOR_SHARE else 1
    return [(name, MUTATORS[name][0]) for name in rng.choices(names, weights, k=count)]


@st.composite
def fuzz_examples(
    draw: st.DrawFn,
    models: Sequence[str],
    endpoints: Sequence[Endpoint] = OPENAI_ENDPOINTS + AGENT_ENDPOINTS,
) -> FuzzExample:
    """One example: a base body, usually mutated, serialized, and classified locally.

    Args:
        models: Served model ids (base bodies name one of them or none).
        endpoints: Endpoints to draw from (repeat one to weight it).
    """
    endpoint: Endpoint = draw(st.sampled_from(list(endpoints)))
    base = draw(base_bodies(endpoint, models))
    body: dict[str, Any] | bytes = copy.deepcopy(base)
    names: list[str] = []
    rng = mutation_rng(draw, base)
    for name, mutator in pick_mutators(rng, endpoint):
        if isinstance(body, bytes):
            break  # raw bodies are final
        body = mutator(rng, body, endpoint)
        names.append(name)
    raw = _serialize(body)
    _, _, request = local_verdict(endpoint, raw, models)
    if request is not None and not _cheap(endpoint, request):
        if isinstance(body, dict):  # a mutator unset or enlarged the output limit: keep it cheap
            _set_output_limit(body, endpoint, CHEAP_MAX_TOKENS)
            raw = _serialize(body)
        else:
            raw, names = _serialize(base), []
    return make_example(endpoint, raw, models, tuple(names))


def make_example(
    endpoint: Endpoint,
    body: dict[str, Any] | bytes,
    models: Sequence[str],
    mutators: tuple[str, ...] = (),
) -> FuzzExample:
    """An example from a given body (e.g. a regression found by fuzzing), classified locally."""
    raw = _serialize(body)
    invalid, reason, _ = local_verdict(endpoint, raw, models)
    return FuzzExample(endpoint, raw, mutators, invalid, reason)


def hand_written_examples(model: str) -> list[FuzzExample]:
    """The hand-written bodies of every agent endpoint (`load_tests.fuzz_agent_bodies`) for
    `model` (one with tools and a tool parser: some bodies declare tools), each with an output
    limit of `CHEAP_MAX_TOKENS`: bodies every server of these APIs should serve."""
    out = []
    for endpoint in ("messages", "count_tokens", "responses"):
        for written in RESPONSES_BODIES if endpoint == "responses" else MESSAGES_BODIES:
            body = {**copy.deepcopy(written), "model": model}
            _set_output_limit(body, endpoint, CHEAP_MAX_TOKENS)
            out.append(make_example(endpoint, body, [model], ("hand_written",)))
    return out


def valid_request(model: str, max_tokens: int = 2) -> dict[str, Any]:
    """The probe request that must be served after each example."""
    return {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": max_tokens,
        "model": model,
    }
