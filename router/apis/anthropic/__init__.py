"""The Anthropic Messages API edge: `AnthropicEdge`."""

from router.apis.anthropic.edge import AnthropicEdge

__all__ = ["AnthropicEdge"]
