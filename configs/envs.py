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


def op_impl_overrides() -> dict[str, str]:
    """Per-op implementation overrides from `ASCEND_ROUTER_OP_IMPL`, for debugging.

    The value is a comma-separated list of `op=impl` pairs, e.g.
    `ASCEND_ROUTER_OP_IMPL="rms_norm=reference,swiglu=npu"`; empty when unset. Names are checked
    against the op registry at start-up (`npu_ops.ops.registry.OpRegistry.select`).

    Raises:
        ValueError: an item is not of the form `op=impl`.
    """
    raw = os.environ.get("ASCEND_ROUTER_OP_IMPL", "")
    overrides: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        op, sep, impl = item.partition("=")
        if not sep or not op.strip() or not impl.strip():
            raise ValueError(
                f"ASCEND_ROUTER_OP_IMPL item {item!r} is not 'op=impl' "
                "(e.g. ASCEND_ROUTER_OP_IMPL='rms_norm=reference,swiglu=npu')"
            )
        overrides[op.strip()] = impl.strip()
    return overrides


def ascend_environment() -> dict[str, str]:
    """The Ascend runtime variables set in this process: every `ASCEND_*` and `HCCL_*` variable.

    `set_env.sh` of the CANN toolkit exports `ASCEND_TOOLKIT_HOME` and `ASCEND_HOME_PATH`;
    `ASCEND_RT_VISIBLE_DEVICES` restricts the visible NPUs; `HCCL_*` tune collective
    communication. Read by `ascend-router doctor`.
    """
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("ASCEND_", "HCCL_"))}


def ray_address() -> str | None:
    """Address of an existing Ray cluster from `RAY_ADDRESS`; None when unset or empty."""
    return os.environ.get("RAY_ADDRESS") or None
