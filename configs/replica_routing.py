"""How a model deployment's calls are spread over its replicas (`models[].routing`).

Example (YAML)::

    routing:
      replica: prefix_aware        # or power_of_two (Ray Serve's default)
      imbalanced_threshold: 8      # queue-length gap beyond which prefix_aware balances load
      session_affinity: true       # a request's session key keeps it on one replica

The request routers themselves are in `router.replica_router`; which request fields and headers
make a session key is the router's `session_key` (`configs.model_config.RouterAppConfig`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ReplicaChoice = Literal["power_of_two", "prefix_aware"]

SessionSource = Annotated[
    str, StringConstraints(pattern=r"^(header:[A-Za-z0-9-]+|prompt_cache_key|user)$")
]
"""One place a session key is read from: `header:<name>`, or the body's `prompt_cache_key` or
`user` (OpenAI's fields for cache routing and end-user ids)."""


class ReplicaRouting(BaseModel):
    """Replica choice for one model deployment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replica: ReplicaChoice = Field(
        "power_of_two",
        description="power_of_two: two random replicas, the shorter queue (Ray Serve's "
        "default). prefix_aware: the replica whose earlier requests share the longest prefix "
        "with this one (adapter, tools and messages in order), so its prefix cache hits; "
        "power of two while the replicas' queues differ by more than imbalanced_threshold.",
    )
    imbalanced_threshold: float = Field(
        8,
        ge=0,
        description="prefix_aware: the largest difference between the replicas' queue lengths "
        "(requests) at which the prefix still decides; beyond it, power of two.",
    )
    match_rate_threshold: float = Field(
        0.1,
        ge=0,
        le=1,
        description="prefix_aware: the shortest shared prefix, as a fraction of the request's "
        "text, that counts as a match; below it the request goes to the replica that holds "
        "the least routed text.",
    )
    tree_max_chars: int = Field(
        4_000_000,
        gt=0,
        description="prefix_aware: characters of routed text the prefix tree keeps; beyond "
        "this the least recently used are evicted down to 90 %.",
    )
    session_affinity: bool = Field(
        True,
        description="A request carrying a session key (the router's session_key) goes to the "
        "same replica while that replica is live and its queue not full, by rendezvous "
        "hashing: replicas joining or leaving move only their own sessions.",
    )
