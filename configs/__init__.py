"""Typed configuration models and the Ray Serve YAML files that use them."""
