"""The building blocks of the fuzz mutators (`load_tests.fuzz_mutators`): body paths, the
known request fields, a reference tool and tool call, and the seeded choices every mutator makes.

A mutator takes a seeded `random.Random` (see `fuzz_requests.mutation_rng`), a body (a dict it
may change in place) and the endpoint, and returns the new body: a dict, or final `bytes` when
the body cannot be built as a Python object first (`with_raw`).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

from configs.request_limits import RequestLimits
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from router.apis.anthropic.protocol import CountTokensRequest, MessagesRequest
from router.apis.responses.protocol import ResponsesRequest

Body = dict[str, Any]
Mutator = Callable[[random.Random, Body, str], "Body | bytes"]
JsonPath = tuple["str | int", ...]

LIMITS = RequestLimits()
_RAW = "\x00fuzz-raw\x00"
FIELDS = {
    "chat": sorted(ChatCompletionRequest.model_fields),
    "completions": sorted(CompletionRequest.model_fields),
    "messages": sorted(MessagesRequest.model_fields),
    "count_tokens": sorted(CountTokensRequest.model_fields),
    "responses": sorted(ResponsesRequest.model_fields),
}
"""Each endpoint's top-level request fields."""
TURNS = {
    "chat": "messages",
    "messages": "messages",
    "count_tokens": "messages",
    "responses": "input",
}
"""The field that holds the conversation, by endpoint (completions has none: `prompt`)."""
STOPS = {"messages": "stop_sequences", "count_tokens": "stop_sequences"}
"""The stop-strings field where it is not `stop`."""
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def value_paths(body: Any, max_depth: int = 6) -> list[JsonPath]:
    """Paths of every value inside `body` (not the root), breadth first, to `max_depth`."""
    out: list[JsonPath] = []
    frontier: list[tuple[JsonPath, Any]] = [((), body)]
    for _ in range(max_depth):
        nxt: list[tuple[JsonPath, Any]] = []
        for path, node in frontier:
            if not isinstance(node, (dict, list)):
                continue
            for key, child in node.items() if isinstance(node, dict) else enumerate(node):
                out.append((*path, key))
                nxt.append(((*path, key), child))
        frontier = nxt
    return out


def set_at(body: Body, path: JsonPath, value: Any) -> None:
    """Set the value at `path` (the last key is created in a dict); where an earlier mutation
    changed the shape so that `path` no longer leads anywhere, set the top-level `path[0]`."""
    node: Any = body
    try:
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        body[str(path[0])] = value


def get_at(body: Any, path: JsonPath) -> Any:
    """The value at `path`."""
    for key in path:
        body = body[key]
    return body


def with_raw(body: Body, path: JsonPath, raw: str) -> bytes:
    """`body` serialized with the JSON text `raw` spliced in at `path` (any text, even invalid
    JSON or thousands of nesting levels)."""
    set_at(body, path, _RAW)
    return json.dumps(body).replace(json.dumps(_RAW), raw, 1).encode("utf-8", "surrogatepass")


def json_kind(value: Any) -> str:
    """The JSON type of `value` as a key of `fuzz_mutators.WRONG_VALUES` (`none` for null)."""
    return "none" if value is None else type(value).__name__


def pick(rng: random.Random, options: list[Any]) -> Any:
    """A copy of one option (a later mutator may change it in place)."""
    return copy.deepcopy(rng.choice(options))


def coin(rng: random.Random) -> bool:
    """A fair coin."""
    return rng.random() < 0.5


def field_path(rng: random.Random, body: Body, endpoint: str) -> JsonPath:
    """A nested value of the body, or a known top-level field (present or not)."""
    paths = value_paths(body)
    if paths and coin(rng):
        return pick(rng, paths)
    return (pick(rng, FIELDS[endpoint]),)
