"""Builds the `ascend-router` Serve application from its config (`serve run configs/*.yaml`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle

from configs.envs import api_keys_from_env, log_level
from configs.model_config import RouterAppConfig
from deployments.metrics.board import MetricsBoard
from deployments.server import ModelServer
from router import APP_NAME
from router.ingress import Router
from router.lora_registry import LoraRegistry
from router.replica_router import request_router_config

__all__ = ["APP_NAME", "build_app", "model_deployment_name", "model_handles", "router_app"]


def model_deployment_name(model_id: str) -> str:
    """The Serve deployment name of a model's `ModelServer`, e.g. `model-smollm2-fast`."""
    return f"model-{model_id}"


def build_app(args: dict[str, Any]) -> Application:
    """Application builder named by `import_path: router.app:build_app`.

    Validating the config also checks the routing policy against the models' capabilities, so
    a bad policy fails here, before anything starts, with an error naming the rule or alias.
    Besides the router and one `ModelServer` deployment per model, the application runs the
    metrics board its model replicas report to (`deployments.metrics.board`) and, when a model
    allows runtime LoRA loading, the registry of runtime adapters (`router.lora_registry`).

    Args:
        args: the application's `args` from the Serve config (see `RouterAppConfig`).

    Raises:
        pydantic.ValidationError: the config or its policy is invalid (names the bad field,
            rule or alias).
    """
    logging.basicConfig(level=log_level())
    config = RouterAppConfig.model_validate(args)
    if not config.api_keys:
        config.api_keys = api_keys_from_env()
    monitoring = config.monitoring.model_dump()
    board = MetricsBoard.bind(monitoring)  # every model replica reports its metrics there
    runtime_lora = any(m.engine.lora and m.engine.lora.allow_runtime_lora for m in config.models)
    registry = LoraRegistry.bind() if runtime_lora else None
    models = {
        m.model_id: ModelServer.options(
            name=model_deployment_name(m.model_id),
            request_router_config=request_router_config(m.routing),
            **m.deployment.serve_options(),
        ).bind(m.model_dump(), board, monitoring, registry)
        for m in config.models
    }
    return router_app(config, models, registry)


def router_app(
    config: RouterAppConfig,
    models: Mapping[str, Application | DeploymentHandle],
    lora_registry: Application | DeploymentHandle | None = None,
) -> Application:
    """The router deployment of `config` in front of `models`.

    Args:
        config: the router's config; its `models` describe what `models` serve.
        models: model id -> the bound `ModelServer` (a new application), or the handle of one
            that another application already runs (`model_handles`), so that a second router
            application (other policy, other API keys) can front the same replicas.
        lora_registry: the bound `LoraRegistry`, or the handle of another application's
            (None: no runtime LoRA loading through this router).
    """
    return Router.options(name="router", **config.router_deployment.serve_options()).bind(
        config.model_dump(), dict(models), lora_registry
    )


def model_handles(config: RouterAppConfig, app_name: str = APP_NAME) -> dict[str, DeploymentHandle]:
    """Handles of the model deployments of `config` running in application `app_name`."""
    return {
        m.model_id: serve.get_deployment_handle(model_deployment_name(m.model_id), app_name)
        for m in config.models
    }
