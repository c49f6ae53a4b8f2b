"""Server-sent events as the OpenAI streaming API sends them: `data: <json>\\n\\n`, then
`data: [DONE]\\n\\n` (OpenAI API reference, "Streaming"; the WHATWG HTML living standard,
"Server-sent events", for the framing)."""

from __future__ import annotations

import json

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse

DONE = "data: [DONE]\n\n"
"""The event that ends every stream."""


def sse_event(item: BaseModel) -> str:
    """One stream item (a chunk, or an error that ends the stream) as one SSE event."""
    if isinstance(item, ErrorResponse):
        return f"data: {json.dumps(item.body())}\n\n"
    return f"data: {item.model_dump_json()}\n\n"
