"""Block-scaled FP8 and MXFP4 checkpoints (`engine.quantization.fp8_loader`): tiny DeepSeek-V3
and -V4 written in the official layouts (`fixtures.fp8_checkpoints`) load with their codes
resident and serve the greedy tokens transformers generates on the same checkpoint dequantised
to float32; `plan` counts their stored bytes; an unsupported `quant_method` is a start-up error;
the Atlas A2/A3 path (W8A8_DYNAMIC converted at load) stays close to the dequantised model.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import pytest
import torch
from engine_helpers import assert_same_until_tie, greedy, hf_reference, run_to_completion
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from configs.model_config import ModelDeploymentConfig
from engine.checkpoint_ref import CheckpointRef
from engine.llm_engine import LLMEngine
from engine.model_loader import load_model, weight_bytes
from engine.quantization.experts import W8A8DynamicExperts
from engine.quantization.fp8_config import checkpoint_quantization
from engine.quantization.fp8_experts import BlockScaledExperts
from engine.quantization.fp8_linear import BlockScaledLinear
from engine.quantization.fp8_loader import convert_to_w8a8, f4_key_mapping, to_w8a8
from engine.quantization.linear import W8A8DynamicLinear
from fixtures.fp8_checkpoints import FP8_FAMILIES, dequantised_checkpoint, make_fp8_checkpoint
from fixtures.tiny_checkpoints import SMALL_VOCAB
from operate.planning.model_facts import model_facts

NUM_PROMPTS = 4
NEW_TOKENS = 8


@pytest.fixture(scope="module", params=FP8_FAMILIES)
def checkpoints(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    """(family, its FP8 checkpoint, the same dequantised to float32)."""
    root = tmp_path_factory.mktemp(request.param)
    fp8 = make_fp8_checkpoint(request.param, root / "fp8")
    return request.param, fp8, dequantised_checkpoint(fp8, root / "reference")


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, SMALL_VOCAB) for _ in range(5 + 3 * i)] for i in range(NUM_PROMPTS)]


def test_layout_is_the_official_one(checkpoints: tuple[str, Path, Path]) -> None:
    family, fp8, _ = checkpoints
    from safetensors import safe_open

    dtypes = {}
    for shard in fp8.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as f:
            dtypes.update({n: f.get_slice(n).get_dtype() for n in f.keys()})
    config = json.loads((fp8 / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == "fp8" and qc["weight_block_size"] == [16, 16]
    if family == "deepseek_v3":
        layer = "model.layers.1.self_attn.kv_a_proj_with_mqa"
        assert dtypes[f"{layer}.weight"] == "F8_E4M3"
        assert dtypes[f"{layer}.weight_scale_inv"] == "F32"
        assert dtypes["model.layers.1.mlp.gate.weight"] == "BF16"  # the router stays float
    else:
        assert qc["scale_fmt"] == "ue8m0" and config["expert_dtype"] == "fp4"
        assert (dtypes["layers.1.attn.wq_a.weight"], dtypes["layers.1.attn.wq_a.scale"]) == (
            "F8_E4M3",
            "F8_E8M0",
        )
        expert = "layers.2.ffn.experts.3.w1"
        assert (dtypes[f"{expert}.weight"], dtypes[f"{expert}.scale"]) == ("I8", "F8_E8M0")
        assert "embed.weight" in dtypes and "head.weight" in dtypes


def test_codes_stay_resident(checkpoints: tuple[str, Path, Path]) -> None:
    family, fp8, reference = checkpoints
    model = load_model(CheckpointRef.from_path(fp8), torch.float32, torch.device("cpu"))
    linears = [m for m in model.modules() if isinstance(m, BlockScaledLinear)]
    experts = [m for m in model.modules() if isinstance(m, BlockScaledExperts)]
    assert linears and experts
    assert all(m.weight.get().dtype == torch.float8_e4m3fn for m in linears)
    assert {m.block_size for m in experts} == {None if family == "deepseek_v4" else (16, 16)}
    float_model = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32)
    assert weight_bytes(model) < 0.85 * weight_bytes(float_model)


def test_greedy_equals_the_dequantised_model_in_transformers(
    checkpoints: tuple[str, Path, Path],
) -> None:
    _, fp8, reference = checkpoints
    engine = LLMEngine(
        str(fp8),
        EngineConfig(
            dtype="float32",
            block_size=16,
            num_kv_blocks=32,
            max_model_len=128,
            max_num_batched_tokens=128,
            max_num_seqs=NUM_PROMPTS,
        ),
    )
    prompts = _prompts()
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, greedy(NEW_TOKENS))
    out = run_to_completion(engine)
    ref_model = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32).eval()
    for i, prompt in enumerate(prompts):
        want = hf_reference(ref_model, prompt, NEW_TOKENS)
        assert_same_until_tie(out[str(i)], want, prompt, ref_model)


def test_plan_counts_the_stored_bytes(checkpoints: tuple[str, Path, Path]) -> None:
    _, fp8, reference = checkpoints
    facts = {}
    for path in (fp8, reference):
        model = ModelDeploymentConfig.model_validate(
            {"model_id": "tiny", "source": {"path": str(path)}, "engine": {"dtype": "float32"}}
        )
        facts[path] = model_facts(model)
    weights = facts[fp8].weights
    assert weights is not None and facts[reference].weights is None
    assert weights.num_parameters == facts[reference].num_parameters
    stored = sum(p.stat().st_size for p in fp8.glob("*.safetensors"))
    float32_bytes = facts[reference].num_parameters * 4
    assert weights.total < float32_bytes and weights.int8_parameters > 0
    # the codes at 1 byte (or half), the rest as float32: at most the files' size converted
    assert weights.total < 2 * stored


@pytest.mark.parametrize("method", ["awq", "gptq", "bitsandbytes"])
def test_unsupported_quant_method_is_a_startup_error(tmp_path: Path, method: str) -> None:
    path = tmp_path / "config.json"
    cfg = {"model_type": "deepseek_v3", "quantization_config": {"quant_method": method}}
    with pytest.raises(ValueError, match=rf"quant_method '{method}' is not supported.*fp8"):
        checkpoint_quantization(cfg, path)


def test_engine_start_refuses_an_unsupported_method(
    checkpoints: tuple[str, Path, Path], tmp_path: Path
) -> None:
    _, fp8, _ = checkpoints
    copy = Path(shutil.copytree(fp8, tmp_path / "awq"))
    config = json.loads((copy / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="quant_method 'awq' is not supported; supported: fp8"):
        load_model(CheckpointRef.from_path(copy), torch.float32, torch.device("cpu"))


def test_atlas_a2_path_converts_to_w8a8_close_to_the_fp8_layers(
    checkpoints: tuple[str, Path, Path],
) -> None:
    """On an NPU every FP8/MXFP4 layer becomes W8A8_DYNAMIC at load (`to_w8a8`): per-channel
    int8 of the dequantised weight, int8 activations per token. Each converted layer's output
    stays within 3% of its FP8 layer's largest output (measured below 1.5%)."""
    _, fp8, _ = checkpoints
    model = load_model(CheckpointRef.from_path(fp8), torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    converted = 0
    for module in list(model.modules()):
        if not isinstance(module, BlockScaledLinear | BlockScaledExperts):
            continue
        w8a8, weight_err = to_w8a8(module)
        assert weight_err < 0.01
        if isinstance(module, BlockScaledLinear):
            assert isinstance(w8a8, W8A8DynamicLinear)
            x = torch.randn(6, module.in_features, generator=gen)
            want, got = module(x), w8a8(x)
        else:
            assert isinstance(w8a8, W8A8DynamicExperts)
            x = torch.randn(6, module.hidden_dim, generator=gen)
            ids = torch.randint(0, module.num_experts, (6, 2), generator=gen)
            weights = torch.rand(6, 2, generator=gen)
            want, got = module(x, ids, weights), w8a8(x, ids, weights)
        assert float((got - want).abs().max() / want.abs().max()) < 0.03
        converted += 1
    assert converted > 0


def test_mxfp4_codes_stored_as_f4_load_as_the_int8_packed_ones(tmp_path: Path) -> None:
    """DeepSeek-V4's routed experts with their codes as safetensors `F4` (`float4_e2m1fn_x2`)
    instead of `I8`: transformers never reads them (`f4_key_mapping`), the FP8 loader does, the
    model is the same tensor for tensor, and `plan` counts the same bytes."""
    from safetensors import safe_open

    i8 = make_fp8_checkpoint("deepseek_v4", tmp_path / "i8")
    f4 = make_fp8_checkpoint("deepseek_v4", tmp_path / "f4", fp4_container=torch.float4_e2m1fn_x2)
    expert = "layers.2.ffn.experts.3.w1.weight"
    shard = json.loads((f4 / "model.safetensors.index.json").read_text())["weight_map"][expert]
    with safe_open(str(f4 / shard), framework="pt") as f:
        assert f.get_slice(expert).get_dtype() == "F4"
    assert f4_key_mapping(f4_ref := CheckpointRef.from_path(f4))
    assert f4_key_mapping(CheckpointRef.from_path(i8)) == {}
    models = [
        load_model(ref, torch.float32, torch.device("cpu"))
        for ref in (CheckpointRef.from_path(i8), f4_ref)
    ]
    states = [m.state_dict() for m in models]
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert any(isinstance(m, BlockScaledExperts) for m in models[1].modules())
    plans = [
        model_facts(
            ModelDeploymentConfig.model_validate(
                {"model_id": "tiny", "source": {"path": str(p)}, "engine": {"dtype": "float32"}}
            )
        ).weights
        for p in (i8, f4)
    ]
    assert plans[0] == plans[1]  # an F4 header counts 4-bit values, an I8 one bytes


def test_atlas_a2_conversion_reports_its_rounding_error(
    checkpoints: tuple[str, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, fp8, _ = checkpoints
    model = load_model(CheckpointRef.from_path(fp8), torch.float32, torch.device("cpu"))
    quantised = sum(isinstance(m, BlockScaledLinear | BlockScaledExperts) for m in model.modules())
    with caplog.at_level(logging.INFO, logger="engine.quantization.fp8_loader"):
        report = convert_to_w8a8(model)
    assert report.modules == quantised and 0 < report.max_weight_error < 0.01
    assert f"largest relative weight error {report.max_weight_error:.4f}" in caplog.text
    assert not any(isinstance(m, BlockScaledLinear | BlockScaledExperts) for m in model.modules())
