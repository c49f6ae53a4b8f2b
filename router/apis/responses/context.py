"""What a Responses request leaves for its answer: the Response fields it fixes, carried inside the
translated chat body.

`ApiEdge.answer` and `ApiEdge.events` get back only the chat body that `chat_body` returned, so
the edge keeps its per-request facts there, under `CONTEXT_KEY`. The chat path never sees them:
chat requests ignore unknown fields (`deployments.protocol.requests`), and the replica gets the
validated request, not the body.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

CONTEXT_KEY = "x_responses"
"""The chat-body key of the request's `ResponseContext` (plain JSON)."""


class ResponseContext(BaseModel):
    """The Response facts fixed by the request.

    Attributes:
        id: the response id (`resp_...`), chosen when the request is translated so that every
            stream event names the same one.
        created_at: Unix seconds when the request was translated.
        history_start: index of the first chat message of the conversation proper: 1 when the
            first message is the request's `instructions` (never stored), else 0.
        namespaces: function name -> the `namespace` tool it was declared in (its calls name
            it: `tools.py`).
        echo: the request fields the Response object repeats (`instructions`, `tools`,
            `tool_choice`, `parallel_tool_calls`, `temperature`, `top_p`, `max_output_tokens`,
            `previous_response_id`, `metadata`, `text`, `reasoning`, `store`, `user`).
    """

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: int
    history_start: int
    namespaces: dict[str, str]
    echo: dict[str, Any]

    @property
    def store(self) -> bool:
        """Whether the response is kept for `GET` and `previous_response_id`."""
        return bool(self.echo["store"])

    @classmethod
    def of(cls, chat_body: dict[str, Any]) -> ResponseContext:
        """The context `chat_body` carries.

        Raises:
            KeyError: the body did not come from `ResponsesEdge.chat_body` (a caller's bug).
        """
        return cls.model_validate(chat_body[CONTEXT_KEY])
