"""Builds the `ascend-router` Serve application from its config (`serve run configs/*.yaml`)."""

from __future__ import annotations

import logging
from typing import Any

from ray.serve import Application

from configs.envs import api_keys_from_env, log_level
from configs.model_config import RouterAppConfig
from deployments.server import ModelServer
from router.ingress import Router

APP_NAME = "ascend-router"


def build_app(args: dict[str, Any]) -> Application:
    """Application builder named by `import_path: router.app:build_app`.

    Args:
        args: the application's `args` from the Serve config (see `RouterAppConfig`).

    Raises:
        pydantic.ValidationError: the config is invalid (names the bad field).
    """
    logging.basicConfig(level=log_level())
    config = RouterAppConfig.model_validate(args)
    if not config.api_keys:
        config.api_keys = api_keys_from_env()
    handles = {
        m.model_id: ModelServer.options(
            name=f"model-{m.model_id}", **m.deployment.serve_options()
        ).bind(m.model_dump())
        for m in config.models
    }
    return Router.options(name="router", **config.router_deployment.serve_options()).bind(
        config.model_dump(), handles
    )
