"""Where the Responses API keeps stored responses (router `args.responses_store`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ResponsesStoreConfig(BaseModel):
    """The bounded, in-memory store behind `previous_response_id` and `GET /v1/responses/{id}`.

    It lives in the router replica's memory: with `router_deployment.num_replicas` above 1, a
    follow-up request may reach a replica that does not hold the response and get a 404.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_responses: int = Field(
        10_000,
        gt=0,
        description="Responses kept (with their conversations); the least recently used goes "
        "first when full.",
    )
    max_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="Bytes of text kept (responses and their conversations, a data-URL image "
        "as its base64 text, each message once); the least recently used goes first when full.",
    )
    ttl_s: float = Field(
        3600.0, gt=0, description="Seconds a stored response stays retrievable after it is made."
    )
