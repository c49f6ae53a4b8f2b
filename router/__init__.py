"""The router: OpenAI-compatible HTTP ingress and the routing policy."""

APP_NAME = "ascend-router"
"""Name of the Serve application every config runs (`serve.get_app_handle(APP_NAME)`)."""
