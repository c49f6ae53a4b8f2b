"""Deployment planning: read a Serve config, learn each model's shapes, plan its memory."""
