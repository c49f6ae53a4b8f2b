"""Every environment variable the project reads, in one place."""

from __future__ import annotations

import os


def api_keys_from_env() -> list[str]:
    """Keys from `ASCEND_ROUTER_API_KEYS` (comma-separated); empty when unset."""
    raw = os.environ.get("ASCEND_ROUTER_API_KEYS", "")
    return [k.strip() for k in raw.split(",") if k.strip()]


def log_level() -> str:
    """Log level from `ASCEND_ROUTER_LOG_LEVEL` (default INFO)."""
    return os.environ.get("ASCEND_ROUTER_LOG_LEVEL", "INFO").upper()
