"""The replica routers' pure parts (`router.replica_router`): the prefix key a call is matched
on, rendezvous hashing of session keys, where a session key comes from, and the Serve config
each routing mode becomes. Routing on real Serve: tests/serve/test_replica_routing.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from configs.replica_routing import ReplicaRouting
from deployments.protocol.lora import LoraSpec
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from router.call_context import session_of
from router.replica_router import (
    PowerOfTwoRouter,
    PrefixAwareRouter,
    prefix_key,
    request_router_config,
    session_replica,
)

SYSTEM = {"role": "system", "content": "You are terse."}


def chat(*messages: dict, **extra: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": list(messages), **extra})


def test_a_growing_conversation_extends_its_key() -> None:
    first = chat(SYSTEM, {"role": "user", "content": "Hi"})
    later = chat(
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    )
    assert prefix_key(later).startswith(prefix_key(first))


def test_what_changes_the_kv_changes_the_key_from_its_start() -> None:
    user = chat({"role": "user", "content": "Same words"})
    keys = [
        prefix_key(user),
        prefix_key(chat({"role": "assistant", "content": "Same words"})),
        prefix_key(user, LoraSpec(name="math", path="/a")),
        prefix_key(user, LoraSpec(name="code", path="/b")),
    ]
    assert len(set(keys)) == 4
    # adapters and the base share (almost) no leading text: not a prefix match
    adapters = keys[2:]
    shared = next(i for i, (a, b) in enumerate(zip(*adapters, strict=False)) if a != b)
    assert shared < 0.1 * len(adapters[0])
    assert not keys[2].startswith(keys[0][:10])
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert prefix_key(chat({"role": "user", "content": "Same words"}, tools=[tool])) != keys[0]


def test_completion_prompts_key_on_their_text_or_ids() -> None:
    text = CompletionRequest.model_validate({"prompt": "Once upon"})
    longer = CompletionRequest.model_validate({"prompt": "Once upon a time"})
    assert prefix_key(longer).startswith(prefix_key(text))
    ids = CompletionRequest.model_validate({"prompt": [1, 2, 3]})
    assert prefix_key(ids).endswith("1,2,3")
    assert prefix_key(object())  # anything else: a short, non-empty key


@dataclass(frozen=True)
class _Id:
    unique_id: str


@dataclass(frozen=True)
class _Replica:
    """What `session_replica` reads of a Serve `RunningReplica`."""

    replica_id: _Id
    max_ongoing_requests: int = 4


@dataclass
class _QueueLens:
    lens: dict[_Id, int] = field(default_factory=dict)

    def get(self, replica_id: _Id) -> int | None:
        return self.lens.get(replica_id)


@dataclass
class _Router:
    replica_queue_len_cache: _QueueLens = field(default_factory=_QueueLens)


def test_sessions_stick_and_few_move_when_a_replica_leaves() -> None:
    replicas = [_Replica(_Id(f"r{i}")) for i in range(4)]
    router = _Router()
    sessions = [f"s{i}" for i in range(400)]
    before = {s: session_replica(router, replicas, s) for s in sessions}  # type: ignore[arg-type]
    again = {s: session_replica(router, replicas, s) for s in sessions}  # type: ignore[arg-type]
    assert before == again
    assert {r for r in before.values()} == set(replicas)  # spread over every replica

    gone = replicas[0]
    after = {s: session_replica(router, replicas[1:], s) for s in sessions}  # type: ignore[arg-type]
    moved = [s for s in sessions if after[s] != before[s]]
    assert moved == [s for s in sessions if before[s] is gone]  # only the leaver's sessions


def test_a_full_replica_gives_up_its_session() -> None:
    replicas = [_Replica(_Id("a")), _Replica(_Id("b"))]
    router = _Router()
    chosen = session_replica(router, replicas, "s")  # type: ignore[arg-type]
    assert chosen is not None
    router.replica_queue_len_cache.lens[chosen.replica_id] = chosen.max_ongoing_requests
    assert session_replica(router, replicas, "s") is None  # type: ignore[arg-type]


def test_session_key_sources_in_order() -> None:
    sources = ["header:x-session-id", "prompt_cache_key", "user"]
    request = chat(SYSTEM, prompt_cache_key="cache-1", user="u-1")
    assert session_of(sources, request, {"x-session-id": "h-1"}) == "h-1"
    assert session_of(sources, request, {}) == "cache-1"
    assert session_of(sources, chat(SYSTEM, user="u-1"), {}) == "u-1"
    assert session_of(sources, chat(SYSTEM), {}) is None
    assert session_of([], request, {"x-session-id": "h-1"}) is None


def test_each_mode_becomes_its_request_router() -> None:
    pow2 = request_router_config(ReplicaRouting())
    assert pow2.get_request_router_class() is PowerOfTwoRouter
    prefix = request_router_config(ReplicaRouting(replica="prefix_aware", imbalanced_threshold=3))
    assert prefix.get_request_router_class() is PrefixAwareRouter
    assert prefix.request_router_kwargs["imbalanced_threshold"] == 3
