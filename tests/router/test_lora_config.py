"""LoRA adapters as models at start-up: names, capabilities, policy targets; `lora_root`
confinement of runtime paths; the runtime registry's state and the router's view of it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from app_args import local_app_args
from pydantic import ValidationError

from configs.lora_config import LoraConfig
from configs.model_config import RouterAppConfig
from deployments.protocol.lora import RegistrySnapshot, RuntimeAdapter
from router.adapter_index import AdapterIndex
from router.lora_registry import RuntimeAdapters


def with_adapters(names: list[str], **policy: Any) -> dict[str, Any]:
    """configs/local.yaml's args with adapters `names` on smollm2-long."""
    args = local_app_args()
    model = next(m for m in args["models"] if m["model_id"] == "smollm2-long")
    model["engine"]["lora"] = {"lora_modules": [{"name": n, "path": f"/a/{n}"} for n in names]}
    if policy:
        args["policy"] = policy
    return args


def test_adapters_are_models_with_their_base_capabilities() -> None:
    config = RouterAppConfig.model_validate(with_adapters(["finance", "support"]))
    caps = config.capabilities({})
    assert caps["finance"] == caps["support"] == caps["smollm2-long"]
    assert config.models[1].adapters == {"finance": "/a/finance", "support": "/a/support"}


def test_policy_rules_may_target_adapters() -> None:
    policy = {
        "aliases": {"auto": ["smollm2-long", "finance"]},
        "rules": [{"name": "fin", "when": {"tenant": ["acme"]}, "targets": ["finance"]}],
        "default_targets": ["smollm2-long"],
    }
    config = RouterAppConfig.model_validate(with_adapters(["finance"], **policy))
    assert config.routing_policy().rules[0].targets == ["finance"]


@pytest.mark.parametrize("name", ["smollm2-fast", "auto", "dup"])
def test_adapter_names_must_be_unique_model_ids(name: str) -> None:
    names = ["dup", "dup"] if name == "dup" else [name]
    with pytest.raises(ValidationError, match="already|duplicate"):
        RouterAppConfig.model_validate(with_adapters(names))


def test_adapter_names_are_model_ids() -> None:
    with pytest.raises(ValidationError, match="not valid"):
        RouterAppConfig.model_validate(with_adapters(["a/b"]))


def test_relative_adapter_paths_resolve_where_the_config_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = LoraConfig(lora_modules=[{"name": "a", "path": "loras/a"}], lora_root="loras")
    assert config.lora_modules[0].path == str(tmp_path / "loras" / "a")
    assert config.lora_root == str(tmp_path / "loras")


def test_runtime_loading_needs_a_root() -> None:
    with pytest.raises(ValidationError, match="lora_root"):
        LoraConfig(allow_runtime_lora=True)
    with pytest.raises(ValueError, match="off"):
        LoraConfig().runtime_path("x")


def test_runtime_paths_stay_under_lora_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "ok").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", root / "link")
    config = LoraConfig(allow_runtime_lora=True, lora_root=str(root))
    assert config.runtime_path("ok") == root / "ok"
    assert config.runtime_path(str(root / "ok")) == root / "ok"
    assert config.runtime_path("ok/../ok") == root / "ok"
    for outside in ("..", "../secret", "/etc", "link", str(tmp_path / "secret")):
        with pytest.raises(ValueError, match="outside lora_root"):
            config.runtime_path(outside)
    (tmp_path / "secret" / "adapter_model.safetensors").write_bytes(b"")
    os.symlink(tmp_path / "secret" / "adapter_model.safetensors", root / "ok" / "w")
    with pytest.raises(ValueError, match=r"\['w'\] link\(s\) outside lora_root"):
        config.runtime_path("ok")  # a file of the adapter links out of the root


def test_registry_adds_once_and_versions_every_change() -> None:
    reg = RuntimeAdapters()
    a = RuntimeAdapter("a", "base", "a")
    reg.add(a)
    with pytest.raises(ValueError, match="already loaded"):
        reg.add(RuntimeAdapter("a", "base", "elsewhere"))
    assert reg.snapshot() == RegistrySnapshot(1, (a,))
    reg.remove("a")
    with pytest.raises(ValueError, match="no runtime-loaded"):
        reg.remove("a")
    assert reg.snapshot() == RegistrySnapshot(2, ())


def test_router_view_ignores_snapshots_older_than_its_own_change() -> None:
    config = RouterAppConfig.model_validate(with_adapters(["finance"]))
    changes: list[int] = []
    index = AdapterIndex(config, lambda: changes.append(1))
    assert index.base("finance") == "smollm2-long" and index.is_static("finance")
    spec = index.spec("finance")
    assert spec is not None and not spec.runtime
    fresh = RegistrySnapshot(3, (RuntimeAdapter("rt", "smollm2-fast", "rt"),))
    index.update(fresh)
    stale = RegistrySnapshot(2, ())
    index.update(stale)  # a read that crossed this replica's own load
    assert index.bases() == {"finance": "smollm2-long", "rt": "smollm2-fast"}
    runtime = index.spec("rt")
    assert runtime is not None and runtime.runtime and runtime.path == "rt"
    assert changes == [1]
    index.update(RegistrySnapshot(4, ()))
    assert index.base("rt") is None and changes == [1, 1]
