"""The OpenAI Responses API on the chat path: `ResponsesEdge` and its `ResponseStore`."""

from router.apis.responses.edge import ResponsesEdge
from router.apis.responses.store import ResponseStore

__all__ = ["ResponseStore", "ResponsesEdge"]
