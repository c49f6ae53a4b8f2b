"""`ascend-router plan` and the engine's start-up give the same KV block count for the same
config, a speculative drafting model's cache included: both size it with
`engine.kv_budget.kv_budget` on the geometry of `engine.kv_layout.kv_spec` and
`engine.spec_decode.draft_kv`. On CPU (`plan --card cpu`) the budget is the explicit
`kv_cache_memory_bytes`, so the counts must be equal, not merely close."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import run_command

from cli import plan_cmd
from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import make_tiny_checkpoint

ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 256,
    "kv_cache_memory_bytes": 3 << 20,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 64,
    "num_threads": 1,
}
K = {"num_speculative_tokens": 2}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random targets (V3 and V4 with one MTP layer) and a draft sharing qwen2's vocab."""
    root = tmp_path_factory.mktemp("plan-vs-engine")
    return {
        "qwen2": make_tiny_checkpoint("qwen2", root / "qwen2", real_vocab=False),
        "draft": make_tiny_checkpoint("llama", root / "draft", real_vocab=False, seed=1),
        "deepseek_v3": make_tiny_checkpoint(
            "deepseek_v3", root / "v3", real_vocab=False, mtp_layers=1
        ),
        "deepseek_v4": make_tiny_checkpoint(
            "deepseek_v4", root / "v4", real_vocab=False, mtp_layers=1
        ),
    }


def _settings(case: str, checkpoints: dict[str, Path]) -> tuple[Path, dict[str, Any]]:
    """The target checkpoint and the `engine` settings of one case."""
    if case == "qwen2":
        return checkpoints["qwen2"], dict(ENGINE)
    if case == "qwen2+draft":
        draft = {"method": "draft", "model": {"path": str(checkpoints["draft"])}, **K}
        return checkpoints["qwen2"], {**ENGINE, "speculative": draft}
    family = case.removesuffix("+mtp")
    engine = {**ENGINE, "speculative": {"method": "mtp", **K}}
    if family == "deepseek_v4":  # blocks hold whole compression windows (ratio 16)
        engine |= {"block_size": 16, "max_model_len": 512}
    return checkpoints[family], engine


def _plan(
    checkpoint: Path, engine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """Exit status and output of `ascend-router plan --card cpu` on one deployment."""
    model = {"model_id": "tiny", "source": {"path": str(checkpoint)}, "engine": engine}
    app = {"name": "ascend-router", "import_path": "router.app:build_app"}
    doc = {"applications": [{**app, "args": {"default_model": "tiny", "models": [model]}}]}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(doc))
    status = run_command(plan_cmd, ["plan", str(config), "--card", "cpu"])
    return status, capsys.readouterr().out


def _planned_blocks(
    checkpoint: Path, engine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> int:
    """The `KV BLOCKS/RANK` that `ascend-router plan --card cpu` prints for one deployment."""
    status, out = _plan(checkpoint, engine, tmp_path, capsys)
    assert status == 0, out
    lines = out.splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    row = next(x for x in lines if x.startswith("tiny "))
    cells = dict(zip(header, (c.strip() for c in row.split("|"))))
    return int(cells["KV BLOCKS/RANK"].split(" x ")[0])


def _engine_blocks(
    checkpoint: Path, engine: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> tuple[int, str]:
    """The block count the engine logs at start-up (and allocates), and that log line."""
    with caplog.at_level(logging.INFO, logger="engine.kv_budget"):
        llm = LLMEngine(str(checkpoint), EngineConfig(**engine))
    try:
        line = next(r.getMessage() for r in caplog.records if r.name == "engine.kv_budget")
        logged = int(re.search(r"-> (\d+) blocks", line).group(1))  # type: ignore[union-attr]
        assert llm.block_manager.num_blocks == logged
        return logged, line
    finally:
        llm.shutdown()


@pytest.mark.parametrize("case", ["qwen2", "qwen2+draft", "deepseek_v3+mtp", "deepseek_v4+mtp"])
def test_plan_and_engine_agree_on_kv_blocks(
    case: str,
    checkpoints: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpoint, engine = _settings(case, checkpoints)
    planned = _planned_blocks(checkpoint, engine, tmp_path, capsys)
    started, line = _engine_blocks(checkpoint, engine, caplog)
    assert planned == started > 0
    assert ("drafting model" in line) is ("speculative" in engine)


def test_a_drafting_model_takes_its_share_of_the_blocks_in_the_plan(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = _planned_blocks(*_settings("qwen2", checkpoints), tmp_path, capsys)
    drafted = _planned_blocks(*_settings("qwen2+draft", checkpoints), tmp_path, capsys)
    assert 0 < drafted < alone


def test_plan_and_engine_both_refuse_a_budget_short_of_one_sequence(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint, engine = _settings("qwen2+draft", checkpoints)
    engine["kv_cache_memory_bytes"] = 100_000  # one 256-token sequence takes 131,072 B
    status, out = _plan(checkpoint, engine, tmp_path, capsys)
    assert status == 1 and "CANNOT FIT tiny: KV budget 0.00 GiB per rank holds 12 blocks" in out
    with pytest.raises(ValueError, match=r"KV cache holds 192 tokens \(12 blocks of 16"):
        LLMEngine(str(checkpoint), EngineConfig(**engine))
