"""Model-server deployments: one model replica, its engine and its OpenAI protocol layer."""
