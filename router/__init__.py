"""The router: OpenAI-compatible HTTP ingress and the routing policy."""
