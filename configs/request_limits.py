"""Bounds on the work one request may ask for (router `args.request_limits`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RequestLimits(BaseModel):
    """Limits checked at the router's edge, before any model sees the request.

    Exceeding one is a 4xx naming the limit: 413 for the body size, 400 for the others.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Bytes of one HTTP request body (413 above)."
    )
    max_json_depth: int = Field(
        64,
        gt=0,
        description="Nesting depth of arrays and objects in the body; checked without "
        "recursion before the JSON is parsed.",
    )
    max_messages: int = Field(4096, gt=0, description="Entries of `messages`.")
    max_tools: int = Field(256, gt=0, description="Entries of `tools`.")
    max_schema_bytes: int = Field(
        64 * 1024,
        gt=0,
        description="Bytes of one JSON Schema (a tool's `parameters`, or "
        "`response_format.json_schema.schema`), as compact JSON.",
    )
    max_prompt_items: int = Field(
        1024, gt=0, description="Prompts in one legacy `/v1/completions` batch."
    )
