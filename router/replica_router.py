"""Which replica of a model deployment takes a call: Ray Serve request routers, set per model.

Ray Serve picks a replica of a deployment in the caller's process through the deployment's
request router (`ray.serve.request_router.RequestRouter`, set with `request_router_config`).
Each model's `routing` (`configs.replica_routing.ReplicaRouting`) selects one of two here:

- `power_of_two` (`PowerOfTwoRouter`): Ray's default, two random replicas and the shorter queue.
- `prefix_aware` (`PrefixAwareRouter`): Ray's `PrefixCacheAffinityRouter`
  (`ray.serve.llm.request_router`): an approximate prefix tree of the text routed to each
  replica, kept by one actor per deployment; while the replicas' queues differ by at most
  `imbalanced_threshold`, a request goes to the replica whose routed text shares the longest
  prefix with its own (at least `match_rate_threshold` of it), else (in Ray's) to the replica
  holding the least text; beyond the threshold, power of two. Subclassed for three reasons:
  1. The text it keys on. Ray's concatenates message contents only, so two LoRA adapters, or
     the same words under another role or other tools, count as a shared prefix although their
     KV differs. Ours is the adapter, then the tools, then each message whole (role, content,
     tool calls), in prompt order: what changes the KV changes the key. One deployment serves
     one chat template, and the tree is per deployment, so the template is part of it too.
  2. A request that matches no replica well enough (`MIN_MATCH_CHARS` at least) goes to the
     least loaded replica (the shortest queue among all), not to the one holding the least
     text: a burst of new conversations, routed before their text is in the tree, would all
     go to that one replica (TTFT p99 1.8x power of two's, `load_tests.replica_routing`).
  3. The tree actor is awaited, not read with a blocking `ray.get` on the routing event loop;
     recording a routed request does not wait at all (calls from one process run in order on
     the actor, so the next lookup sees it).

Both honour session affinity first: a call carrying a `session` keyword (the router sets it
from the request's session key, `router.call_context.CallContext.session`) goes to the replica
that rendezvous hashing (highest random weight) picks for that key among the live replicas,
unless that replica's last known queue is full (`max_ongoing_requests`); then the router's own
choice applies. Rendezvous hashing is a consistent hash: a replica joining or leaving moves only
the sessions it gains or held. Source: Thaler & Ravishankar, "Using name-based mappings to
increase hit rates", IEEE/ACM ToN 6(1), 1998.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pydantic import BaseModel
from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
    PrefixCacheAffinityRouter,  # public as ray.serve.llm.request_router's, whose package
)  # imports all of Ray Serve LLM's dependencies (pyarrow, vLLM's) on the way
from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from configs.replica_routing import ReplicaRouting

MIN_MATCH_CHARS = 64
"""The shortest shared prefix that counts as a match whatever the request's length: less text
cannot fill one KV block (16 tokens of about 4 characters), and every chat key starts alike."""

SESSION_KWARG = "session"
"""The call keyword that carries a session key to the request router (not read by replicas)."""


def session_replica(
    router: RequestRouter, candidates: list[RunningReplica], session: str
) -> RunningReplica | None:
    """The replica rendezvous hashing picks for `session` among `candidates`, or None when its
    last known queue length (Ray's queue-length cache) is at `max_ongoing_requests`."""
    if not candidates:
        return None

    def weight(replica: RunningReplica) -> bytes:
        key = f"{session}\x00{replica.replica_id.unique_id}".encode()
        return hashlib.blake2b(key, digest_size=8).digest()

    chosen = max(candidates, key=weight)
    queue_len = router.replica_queue_len_cache.get(chosen.replica_id)
    if queue_len is not None and queue_len >= chosen.max_ongoing_requests:
        return None
    return chosen


def _session(pending: PendingRequest | None) -> str | None:
    if pending is None:
        return None
    session = pending.kwargs.get(SESSION_KWARG)
    return session if isinstance(session, str) else None


class SessionAffinity:
    """A request-router mixin: a call with a session key goes to `session_replica`'s choice
    when there is one, else to the router it is mixed into (listed after it)."""

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """[[the session's replica]] when affinity applies, else the next router's choice."""
        session = _session(pending_request)
        if session is not None:
            chosen = session_replica(self, candidate_replicas, session)  # type: ignore[arg-type]
            if chosen is not None:
                return [[chosen]]
        chosen_sets: list[list[RunningReplica]] = await super().choose_replicas(  # type: ignore[misc]
            candidate_replicas, pending_request
        )
        return chosen_sets


class PowerOfTwoRouter(SessionAffinity, PowerOfTwoChoicesRequestRouter):
    """Ray's power-of-two choices, after session affinity (module docstring)."""


def prefix_key(request: Any, lora: Any = None) -> str:
    """The text a call's prefix is matched on: a hash of the LoRA adapter's name (so two
    adapters share no leading text), then (chat) the tools and each message whole in order, or
    (completions) the prompt; never empty.

    Args:
        request: A `ChatCompletionRequest` or `CompletionRequest` (or anything else: then its
            type name only, so unknown calls share one short key).
        lora: The call's `LoraSpec`, if it runs under an adapter.
    """
    name = getattr(lora, "name", None)
    head = "" if name is None else hashlib.blake2b(name.encode(), digest_size=4).hexdigest() + "\n"
    messages = getattr(request, "messages", None)
    if isinstance(messages, list):
        tools = getattr(request, "tools", None) or []
        parts = [_json(t) for t in tools] + [_json(m) for m in messages]
        return head + "chat\n" + "\n".join(parts)
    prompt = getattr(request, "prompt", None)
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str):
        prompt = prompt[0]  # a batch: its first prompt
    if isinstance(prompt, list):
        prompt = ",".join(str(t) for t in prompt)  # token ids
    if isinstance(prompt, str):
        return head + "completion\n" + prompt
    return head + type(request).__name__


def _json(item: Any) -> str:
    data = item.model_dump(mode="json", exclude_none=True) if isinstance(item, BaseModel) else item
    return json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)


class PrefixAwareRouter(SessionAffinity, PrefixCacheAffinityRouter):
    """Ray's `PrefixCacheAffinityRouter` keyed on `prefix_key`, after session affinity (module
    docstring)."""

    def _extract_text_from_request(self, pending_request: PendingRequest) -> str:
        request = pending_request.args[0] if pending_request.args else None
        return prefix_key(request, pending_request.kwargs.get("lora"))

    async def _prefix_match_best_replicas(
        self, pending_request: PendingRequest | None, candidate_replicas: list[RunningReplica]
    ) -> list[list[RunningReplica]]:
        """[replicas to pick the shortest queue from]: those holding the longest prefix of the
        request (at least `match_rate_threshold` of it and `MIN_MATCH_CHARS`), else every
        candidate; [[]] (power of two) while the queues differ by more than
        `imbalanced_threshold`."""
        if pending_request is None or not pending_request.args:
            return [[]]
        lens = await self._queue_lens(candidate_replicas)
        if lens and max(lens) - min(lens) > self._imbalanced_threshold:
            return [[]]
        text = self._extract_text_from_request(pending_request)
        ids = [r.replica_id.to_full_id_str() for r in candidate_replicas]
        matched, holders = await self._tree_actor.prefix_match.remote(text, ids)
        least = max(self._match_rate_threshold * len(text), MIN_MATCH_CHARS)
        if not holders or len(matched) < least:
            return [candidate_replicas]
        return [[self._replicas[ReplicaID.from_full_id_str(h)] for h in holders]]

    async def _queue_lens(self, replicas: list[RunningReplica]) -> list[int]:
        """The replicas' queue lengths, from Ray's cache or else probed (unknown ones left
        out)."""
        lens: list[int] = []
        unknown: list[RunningReplica] = []
        for r in replicas:
            cached = self.replica_queue_len_cache.get(r.replica_id)
            if cached is None or not self._use_replica_queue_len_cache:
                unknown.append(r)
            else:
                lens.append(cached)
        if unknown:
            probed = await self._probe_queue_lens(unknown, 0)
            lens += [n for _, n in probed if n is not None]
        return lens

    def on_request_routed(self, pending_request: PendingRequest, replica_id: Any, result: Any):
        """Record the call's text as held by `replica_id`, without waiting for the tree actor."""
        if pending_request is None or not pending_request.args:
            return
        text = self._extract_text_from_request(pending_request)
        self._tree_actor.insert.remote(text, replica_id.to_full_id_str(), time.time())


def request_router_config(routing: ReplicaRouting) -> RequestRouterConfig:
    """The Serve `request_router_config` of a model deployment routed as `routing` says."""
    if routing.replica == "prefix_aware":
        return RequestRouterConfig(
            request_router_class=f"{__name__}:PrefixAwareRouter",
            request_router_kwargs={
                "imbalanced_threshold": routing.imbalanced_threshold,
                "match_rate_threshold": routing.match_rate_threshold,
                "do_eviction": True,
                "eviction_threshold_chars": routing.tree_max_chars,
                "eviction_target_chars": routing.tree_max_chars * 9 // 10,
            },
        )
    return RequestRouterConfig(request_router_class=f"{__name__}:PowerOfTwoRouter")
