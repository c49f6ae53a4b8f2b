"""The replica's LoRA glue (`ReplicaAdapters`) over a scripted engine client: which adapter a
request runs under, runtime loads under `lora_root`, reloads, draining, and the registry sync."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from scripted_client import ScriptedClient

from configs.lora_config import LoraConfig
from deployments.lora_adapters import ReplicaAdapters
from deployments.protocol.errors import OpenAIError
from deployments.protocol.lora import LoraSpec, RuntimeAdapter

T = TypeVar("T")
BASE = "smollm2-135m-instruct"


def run(work: Awaitable[T]) -> T:
    async def go() -> T:
        return await work

    return asyncio.run(go())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for name in ("sql", "sql-v2", "chat"):
        (tmp_path / name).mkdir()
    return tmp_path


def adapters(root: Path, **client: Any) -> tuple[ReplicaAdapters, ScriptedClient]:
    """Adapters of a model with start-up adapter `static` and runtime loading under `root`."""
    engine = ScriptedClient(tokenizer=None, **client)
    config = LoraConfig(
        lora_modules=[{"name": "static", "path": str(root / "chat")}],
        allow_runtime_lora=True,
        lora_root=str(root),
    )
    return ReplicaAdapters(engine, config, BASE), engine


def refusal(work: Awaitable[Any]) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        run(work)
    return info.value


def test_the_base_model_and_start_up_adapters_need_no_load(root: Path) -> None:
    replica, engine = adapters(root)
    assert run(replica.use(None)) is None
    assert run(replica.use(LoraSpec(name="static", path=str(root / "chat")))) == "static"
    assert engine.loras == {}


def test_a_model_without_lora_refuses_every_adapter_with_404(root: Path) -> None:
    replica = ReplicaAdapters(ScriptedClient(tokenizer=None), None, BASE)
    err = refusal(replica.use(LoraSpec(name="sql", path="sql", runtime=True)))
    assert (err.status_code, err.code, err.param) == (404, "model_not_found", "model")
    assert str(err) == f"model {BASE} serves no LoRA adapters (no `engine.lora` section)"


def test_an_unknown_start_up_adapter_is_404(root: Path) -> None:
    replica, _ = adapters(root)
    err = refusal(replica.use(LoraSpec(name="other", path=str(root / "chat"))))
    assert (err.status_code, err.code) == (404, "model_not_found")
    assert str(err) == f"model {BASE} has no LoRA adapter 'other'"


def test_a_runtime_adapter_is_loaded_on_first_use_only(root: Path) -> None:
    replica, engine = adapters(root)
    spec = LoraSpec(name="sql", path="sql", runtime=True)
    assert run(replica.use(spec)) == "sql"
    assert engine.loras == {"sql": str(root / "sql")}
    engine.refused_loras["sql"] = "a second load would fail"
    assert run(replica.use(spec)) == "sql"
    assert replica.runtime == {"sql": "sql"}


def test_a_new_path_reloads_the_adapter_once_it_has_drained(root: Path) -> None:
    replica, engine = adapters(root)
    run(replica.load("sql", "sql"))
    engine.busy_loras.add("sql")
    err = refusal(replica.load("sql", "sql-v2"))
    assert (err.status_code, err.code, err.param) == (409, "lora_adapter_busy", "lora_name")
    assert engine.loras == {"sql": str(root / "sql")} and replica.runtime == {"sql": "sql"}
    engine.busy_loras.clear()
    run(replica.load("sql", "sql-v2"))
    assert engine.loras == {"sql": str(root / "sql-v2")} and replica.runtime == {"sql": "sql-v2"}


@pytest.mark.parametrize(
    ("name", "path", "message"),
    [
        ("sql", "../elsewhere", "lora_path '../elsewhere' is outside lora_root"),
        ("static", "sql", "'static' is a start-up adapter (lora_modules)"),
        ("bad", "sql", "rank 64 is above max_lora_rank 16"),
    ],
)
def test_refused_loads_are_400_invalid_lora_adapter(root: Path, name, path, message) -> None:
    replica, engine = adapters(root, refused_loras={"bad": "rank 64 is above max_lora_rank 16"})
    err = refusal(replica.load(name, path))
    assert (err.status_code, err.code, err.param) == (400, "invalid_lora_adapter", "lora_path")
    assert message in str(err)
    assert engine.loras == {} and replica.runtime == {}


def test_runtime_loading_off_is_refused(root: Path) -> None:
    config = LoraConfig(lora_modules=[{"name": "static", "path": str(root / "chat")}])
    replica = ReplicaAdapters(ScriptedClient(tokenizer=None), config, BASE)
    err = refusal(replica.use(LoraSpec(name="sql", path="sql", runtime=True)))
    assert (err.status_code, err.code) == (400, "invalid_lora_adapter")
    assert "runtime LoRA loading is off for this model" in str(err)


def test_unload_waits_for_the_adapters_requests(root: Path) -> None:
    replica, engine = adapters(root)
    run(replica.load("sql", "sql"))
    engine.busy_loras.add("sql")
    assert run(replica.unload("sql")) is False and "sql" in engine.loras
    engine.busy_loras.clear()
    assert run(replica.unload("sql")) is True and engine.loras == {}
    assert run(replica.unload("never-loaded")) is True


def test_sync_follows_the_registry_for_this_base_model(root: Path) -> None:
    replica, engine = adapters(root, refused_loras={"bad": "missing adapter_config.json"})
    run(replica.load("old", "chat"))
    registered = [
        RuntimeAdapter(name="sql", base=BASE, path="sql"),
        RuntimeAdapter(name="bad", base=BASE, path="sql-v2"),
        RuntimeAdapter(name="theirs", base="another-model", path="sql"),
    ]
    run(replica.sync(registered))
    assert replica.runtime == {"sql": "sql"}, "old unloaded, bad refused and left for next time"
    assert engine.loras == {"sql": str(root / "sql")}
