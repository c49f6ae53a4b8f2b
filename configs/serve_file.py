"""Read the router's typed config from a Ray Serve YAML (or a bare `args` mapping)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from configs.model_config import ModelDeploymentConfig, RouterAppConfig

APP_IMPORT_PATH = "router.app:build_app"

DEFAULT_SERVE_PORT = 8000
"""Ray Serve's HTTP port when `http_options.port` is absent."""


class ConfigFileError(ValueError):
    """The file cannot be read, is not YAML, or holds no ascend-router application."""


def _router_args(doc: Any, path: Path) -> Any:
    if isinstance(doc, dict) and "applications" in doc:
        apps = doc["applications"] or []
        for app in apps:
            if isinstance(app, dict) and app.get("import_path") == APP_IMPORT_PATH:
                return app.get("args")
        raise ConfigFileError(f"{path}: no application with import_path {APP_IMPORT_PATH!r}")
    if isinstance(doc, dict) and "models" in doc:
        return doc
    raise ConfigFileError(f"{path}: neither a Serve config (applications: ...) nor router args")


def read_yaml(path: Path) -> Any:
    """The YAML document in `path`.

    Raises:
        ConfigFileError: the file cannot be read or is not YAML.
    """
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path} is not YAML: {exc}") from None


def load_app_config(path: str | Path) -> RouterAppConfig:
    """The `RouterAppConfig` of the ascend-router application in a Serve YAML.

    Accepts a full Serve config (`applications: [{import_path: router.app:build_app, args}]`,
    like `configs/prod.yaml`) or the `args` mapping alone.

    Raises:
        ConfigFileError: the file cannot be read or parsed, or has no ascend-router application.
        ValueError: the config fails validation (the message names the file and the bad field).
    """
    path = Path(path)
    doc = read_yaml(path)
    try:
        return RouterAppConfig.model_validate(_router_args(doc, path))
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid config:\n{exc}") from None


def pick_model(config: RouterAppConfig, model_id: str | None) -> ModelDeploymentConfig:
    """The deployment called `model_id`, or the config's default model.

    Raises:
        ValueError: no deployment has that id.
    """
    wanted = model_id or config.default
    for model in config.models:
        if model.model_id == wanted:
            return model
    known = ", ".join(m.model_id for m in config.models)
    raise ValueError(f"no model {wanted!r} in the config; models: {known}")


def load_serve_document(path: str | Path) -> dict[str, Any]:
    """The Serve config at `path` as a mapping with `applications`.

    Raises:
        ConfigFileError: the file cannot be read, is not YAML, or is not a full Serve config (a
            bare `args` mapping cannot become a `serveConfigV2`).
    """
    path = Path(path)
    doc = read_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("applications"), list):
        raise ConfigFileError(
            f"{path}: not a Serve config (`applications: [...]`, as `serve run` takes)"
        )
    return doc


def check_http_options(serve_doc: dict[str, Any]) -> int:
    """The Serve HTTP port, after checking that the proxies listen on every interface.

    Shared by `ascend-router kuberay` and `ascend-router systemd --role head`: in both, clients
    on other machines (the Kubernetes Service, a load balancer) reach the proxies by node or
    pod IP, never by loopback.

    Raises:
        ValueError: `http_options` is not a mapping, its `host` is not `0.0.0.0` / `::`, or its
            `port` is not an integer in 1..65535.
    """
    http = serve_doc.get("http_options")
    if http is None:
        http = {}
    if not isinstance(http, dict):
        raise ValueError(f"http_options must be a mapping (host:, port:), got {http!r}")
    host = http.get("host", "0.0.0.0")
    if host not in ("0.0.0.0", "::"):
        raise ValueError(
            f"http_options.host is {host!r}: clients on other machines (the Kubernetes Service, "
            "a load balancer) reach the proxies by node or pod IP, so set host: 0.0.0.0"
        )
    port = http.get("port", DEFAULT_SERVE_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"http_options.port must be an integer in 1..65535, got {port!r}")
    return port
