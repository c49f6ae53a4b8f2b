"""The OpenAI Responses API (`POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`) served
through the chat-completions path (`router.apis.edge.ApiEdge`).

A request is validated (`protocol.py`) and translated into a chat body (`request.py`); the chat
answer comes back as a Response object (`output.py`) or as Responses stream events
(`stream.py`), and, unless the request said `store: false`, is kept in the `ResponseStore`
(`store.py`) for `GET` and for follow-ups naming it as `previous_response_id`. Errors keep
OpenAI's shape, which the chat path already uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import ChatCompletion
from deployments.protocol.validation import parse_request
from router.apis.responses.context import ResponseContext
from router.apis.responses.output import answer, conversation
from router.apis.responses.protocol import ResponsesRequest
from router.apis.responses.request import translate_request
from router.apis.responses.store import ResponseStore
from router.apis.responses.stream import response_events


class ResponsesEdge:
    """The Responses API as an `ApiEdge`, with its stored responses.

    Args:
        store: where responses are kept (one per router replica: see `store.py`).
    """

    api = "responses"

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def chat_body(self, body: Any) -> dict[str, Any]:
        """Validate a Responses body and translate it into a chat-completions body.

        Args:
            body: the parsed JSON body.

        Returns:
            The chat body; it carries the request's `ResponseContext` under `CONTEXT_KEY`, a
            key the chat path ignores.

        Raises:
            OpenAIError: 400 naming the field at fault (`input[2].call_id`, `tools[0].type`,
                ...); 404 `not_found` at `previous_response_id` for a response not stored.
        """
        return translate_request(parse_request(ResponsesRequest, body), self.store)

    def answer(self, request: dict[str, Any], completion: ChatCompletion) -> dict[str, Any]:
        """The Response object for a non-streamed chat answer (stored unless `store: false`).

        Args:
            request: the chat body `chat_body` returned.
            completion: the chat path's answer.
        """
        context = ResponseContext.of(request)
        response = answer(context, completion)
        self._keep(request, context, response)
        return response

    def events(
        self, request: dict[str, Any], items: AsyncIterator[BaseModel]
    ) -> AsyncIterator[str]:
        """The Responses events for a streamed chat answer; the final Response is stored unless
        `store: false`.

        Args:
            request: the chat body `chat_body` returned.
            items: the chat chunks, the usage chunk last, possibly ending in an
                `ErrorResponse` (which ends the events with `response.failed`).
        """
        context = ResponseContext.of(request)
        return response_events(
            context, items, lambda response: self._keep(request, context, response)
        )

    def error_body(self, error: ErrorResponse) -> dict[str, Any]:
        """OpenAI's error body (the Responses API shares it with chat)."""
        return error.body()

    def get(self, response_id: str) -> dict[str, Any]:
        """`GET /v1/responses/{response_id}`: the stored Response object.

        Raises:
            OpenAIError: 404 `not_found` at `response_id` for one not stored, expired or
                deleted.
        """
        return self.store.get(response_id).response

    def delete(self, response_id: str) -> dict[str, Any]:
        """`DELETE /v1/responses/{response_id}`: forget it; OpenAI's deletion object.

        Raises:
            OpenAIError: 404 `not_found` at `response_id` for one not stored.
        """
        self.store.delete(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    def _keep(
        self, request: dict[str, Any], context: ResponseContext, response: dict[str, Any]
    ) -> None:
        if context.store:
            self.store.put(response, conversation(request, context, response))
