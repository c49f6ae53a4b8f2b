"""W8A8 checkpoints written by `ascend-router quantize` run in `LLMEngine` like the float model.

Tiny random checkpoints (`fixtures.tiny_checkpoints`) of the dense families are quantised by the
CLI in both ModelSlim modes and served by the engine on CPU, where the quantised linears compute
through the registry's int8 reference (`torch._int_mm`). Greedy tokens must equal the float
model's; the logit error is printed (`pytest -s`) and bounded relative to the largest logit.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from engine_helpers import greedy, run_to_completion
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from cli.main import main as cli_main
from configs.engine_config import EngineConfig
from engine.checkpoint_ref import CheckpointRef
from engine.llm_engine import LLMEngine
from engine.model_loader import load_model
from engine.quantization import QUANT_DESCRIPTION_FILE
from engine.quantization.int8 import (
    activation_params,
    deq_scale_from_int64,
    deq_scale_to_int64,
    quantize_per_tensor,
    quantize_weight,
)
from engine.quantization.linear import W8A8DynamicLinear, W8A8StaticLinear
from engine.quantization.quantizer import quantize_checkpoint
from engine.step_input import StepInput
from fixtures.tiny_checkpoints import make_tiny_checkpoint

PROMPTS = [[1, 5, 9, 200, 33, 17], [1, 400, 401, 402], [1, 77, 3, 3, 90, 12, 300, 8]]
NUM_CANDIDATES = 24
"""Seeded random prompts generated from; those with clear float margins must match exactly."""
NEW_TOKENS = 4
MIN_CLEAR = 4
"""Candidates whose greedy margins exceed the flip bound, at least (else the model is too flat)."""
MAX_REL_ERR = 0.02
"""Bound on max |logit - float logit| / max |float logit| (measured: up to about 0.01)."""
MEAN_REL_ERR = 0.004
"""Bound on the mean of the same ratio (measured: up to about 0.0012)."""

CASES = [
    ("qwen2", "w8a8"),
    ("qwen2", "w8a8_dynamic"),
    ("llama", "w8a8_dynamic"),
    ("qwen3", "w8a8"),
    ("phi3", "w8a8_dynamic"),
]


def make_engine(path: Path) -> LLMEngine:
    return LLMEngine(
        str(path), EngineConfig(dtype="float32", num_kv_blocks=64, block_size=8, max_model_len=256)
    )


def all_logits(engine: LLMEngine, tokens: list[int]) -> torch.Tensor:
    """`[len(tokens), vocab]` logits of one prefill through the engine's executor (fresh blocks)."""
    blocks = list(range(-(-len(tokens) // engine.config.block_size)))
    step = StepInput(tokens, [0], [len(tokens)], [blocks], list(range(len(tokens))), [len(tokens)])
    return engine.executor.execute(step).logits


def greedy_tokens(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, greedy(NEW_TOKENS))
    out = run_to_completion(engine)
    return [out[str(i)] for i in range(len(prompts))]


def candidates(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(3, 9, (NUM_CANDIDATES,), generator=g).tolist()
    return [[1, *torch.randint(3, vocab, (n,), generator=g).tolist()] for n in lens]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], tuple[Path, Path]]:
    """`(family, mode)` -> (float checkpoint, its quantised copy made by the CLI)."""
    root = tmp_path_factory.mktemp("w8a8")

    def make(family: str, mode: str) -> tuple[Path, Path]:
        src, dst = root / family, root / f"{family}-{mode}"
        if not src.exists():
            make_tiny_checkpoint(family, src, real_vocab=False, seed=0)
        if not dst.exists():
            assert cli_main(["quantize", str(src), str(dst), "--mode", mode]) == 0
        return src, dst

    return make


@pytest.mark.parametrize(("family", "mode"), CASES)
def test_quantised_checkpoint_generates_like_the_float_model(
    family: str, mode: str, checkpoint: Callable[[str, str], tuple[Path, Path]]
) -> None:
    src, dst = checkpoint(family, mode)
    float_engine, quant_engine = make_engine(src), make_engine(dst)
    layer_type = W8A8StaticLinear if mode == "w8a8" else W8A8DynamicLinear
    model = quant_engine.executor.model  # type: ignore[attr-defined]
    quantised = [m for m in model.modules() if isinstance(m, layer_type)]
    assert len(quantised) == 2 * (4 if family == "phi3" else 7)  # 2 layers; phi3 fuses qkv, gate_up

    prompts = candidates(float_engine.vocab_size)
    want = greedy_tokens(float_engine, prompts)
    got = greedy_tokens(quant_engine, prompts)
    # logits at every position of prompt + greedy continuation (the last NEW_TOKENS rows are
    # the float model's greedy decisions)
    seqs = [p + w[:-1] for p, w in zip(prompts, want)]
    ref = [all_logits(float_engine, s) for s in seqs]
    errs = [(all_logits(quant_engine, s) - r).abs() for s, r in zip(seqs, ref)]
    err = torch.cat([e.flatten() for e in errs])
    scale = max(r.abs().max().item() for r in ref)
    max_err, mean_err = err.max().item(), err.mean().item()
    top2 = [r[-NEW_TOKENS:].topk(2).values for r in ref]
    margins = [(t[:, 0] - t[:, 1]).min().item() for t in top2]
    # a greedy pick can flip only where the float top-2 gap is below twice the logit error
    clear = [i for i, (m, e) in enumerate(zip(margins, errs)) if m > 2.5 * e.max().item()]
    same = sum(g == w for g, w in zip(got, want))
    print(
        f"\n{family} {mode}: logit error max {max_err:.3e} mean {mean_err:.3e} (max |logit| "
        f"{scale:.3e}: relative {max_err / scale:.4f} / {mean_err / scale:.5f}); greedy "
        f"{NEW_TOKENS} tokens equal for {same}/{len(prompts)} prompts, {len(clear)} with clear "
        "margins"
    )
    assert max_err <= MAX_REL_ERR * scale
    assert mean_err <= MEAN_REL_ERR * scale
    assert len(clear) >= MIN_CLEAR, f"tiny model too flat: top-2 margins {margins}"
    assert [got[i] for i in clear] == [want[i] for i in clear]


def test_float16_checkpoint_stores_deq_scale_as_int64(tmp_path: Path) -> None:
    src = make_tiny_checkpoint("qwen2", tmp_path / "bf16", real_vocab=False, seed=0)
    fp16 = tmp_path / "fp16"
    AutoModelForCausalLM.from_pretrained(src, dtype=torch.float16).save_pretrained(fp16)
    quantize_checkpoint(fp16, tmp_path / "q", "w8a8", calibration=PROMPTS)
    with safe_open(tmp_path / "q" / "quant_model_weights.safetensors", framework="pt") as f:
        deq = f.get_tensor("model.layers.0.self_attn.q_proj.deq_scale")
        assert deq.dtype == torch.int64
        assert f.get_tensor("model.layers.0.self_attn.q_proj.input_scale").dtype == torch.float16
    ref, got = make_engine(fp16), make_engine(tmp_path / "q")
    r, g = all_logits(ref, PROMPTS[0]), all_logits(got, PROMPTS[0])
    assert (g - r).abs().max().item() <= MAX_REL_ERR * r.abs().max().item()


def _edit_description(src: Path, dst: Path, edit: Callable[[dict[str, str]], None]) -> None:
    shutil.copytree(src, dst)
    path = dst / QUANT_DESCRIPTION_FILE
    desc = json.loads(path.read_text())
    edit(desc)
    path.write_text(json.dumps(desc))


def test_unsupported_or_unplaced_tensors_fail_naming_them(
    tmp_path: Path, checkpoint: Callable[[str, str], tuple[Path, Path]]
) -> None:
    _, dst = checkpoint("qwen2", "w8a8_dynamic")
    cpu = torch.device("cpu")

    w4 = tmp_path / "w4"
    _edit_description(
        dst, w4, lambda d: d.update({"model.layers.1.mlp.down_proj.weight": "W4A8_DYNAMIC"})
    )
    with pytest.raises(ValueError, match=r"down_proj.weight is quantised as 'W4A8_DYNAMIC'"):
        load_model(CheckpointRef.from_path(w4), torch.float32, cpu)

    smooth = tmp_path / "smooth"
    _edit_description(dst, smooth, lambda d: d.update({"model.norm.module.bias": "W8A8_DYNAMIC"}))
    with pytest.raises(ValueError, match=r"model.norm.module.bias .* has no place"):
        load_model(CheckpointRef.from_path(smooth), torch.float32, cpu)


def test_quantize_cli_refuses_moe_families_and_non_empty_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moe = make_tiny_checkpoint("qwen3_moe", tmp_path / "moe", real_vocab=False, seed=0)
    assert cli_main(["quantize", str(moe), str(tmp_path / "out"), "--mode", "w8a8"]) == 2
    assert "qwen3_moe" in capsys.readouterr().err
    assert cli_main(["quantize", str(moe), str(moe), "--mode", "w8a8_dynamic"]) == 2
    assert "not empty" in capsys.readouterr().err


def test_int8_arithmetic_round_trips() -> None:
    deq = torch.rand(16) * 1e-3
    assert torch.equal(deq_scale_from_int64(deq_scale_to_int64(deq)), deq)
    scale, offset = activation_params(-3.0, 5.0)
    x = torch.tensor([-3.0, 0.0, 5.0])
    q = quantize_per_tensor(x, torch.tensor(scale), torch.tensor(offset))
    assert q.tolist()[0] == -128 and q.tolist()[2] == 127
    assert torch.allclose((q.float() - offset) * scale, x, atol=scale / 2)
    w = torch.randn(8, 32)
    wq, ws = quantize_weight(w)
    assert wq.dtype == torch.int8 and bool(
        ((wq.float() * ws[:, None] - w).abs() <= ws[:, None] / 2 + 1e-7).all()
    )
