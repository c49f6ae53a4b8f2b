"""The op preflight and `ascend-router ops-check` on this (CPU) machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import run_command
from op_helpers import small_shapes

from cli import main as cli_main
from cli import ops_check_cmd
from npu_ops.ops import REGISTRY
from npu_ops.ops.registry import Implementation
from operate.ops_check.preflight import check_impl, compare
from operate.ops_check.samples import build_case
from operate.ops_check.shapes import OpShapes

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"


def test_compare_accepts_bf16_rounding_and_rejects_real_errors() -> None:
    want = torch.randn(8, 8)
    assert compare("rms_norm", want.bfloat16(), want.bfloat16().float().bfloat16())[0]
    ok, err, reason = compare("rms_norm", want.bfloat16() + 0.5, want.bfloat16())
    assert not ok and err == pytest.approx(0.5, abs=0.01) and "beyond" in reason


def test_compare_routing_ignores_the_order_of_chosen_experts() -> None:
    w, ids = torch.tensor([[0.7, 0.3]]), torch.tensor([[5, 2]], dtype=torch.int32)
    assert compare("moe_topk_softmax", (w.flip(-1), ids.flip(-1)), (w, ids))[0]
    assert not compare("moe_topk_softmax", (w, ids.flip(-1)), (w, ids))[0]


def test_compare_allows_one_step_of_int8_rounding_only_for_quantisation() -> None:
    a = torch.tensor([[3, -5]], dtype=torch.int8)
    b = torch.tensor([[4, -5]], dtype=torch.int8)
    assert compare("dynamic_quant", (a, torch.ones(1)), (b, torch.ones(1)))[0]
    assert not compare("moe_dispatch", a, b)[0]


def test_compare_allows_activation_quantisation_only_for_the_fp8_and_mxfp4_matmuls() -> None:
    want = torch.linspace(-10, 10, 64).reshape(8, 8).bfloat16()
    got = want + 0.3  # 3 % of the largest output: an FP8-activation kernel's rounding
    assert compare("fp8_block_matmul", got, want)[0] and compare("mxfp4_matmul", got, want)[0]
    assert not compare("rms_norm", got, want)[0]
    assert not compare("fp8_block_matmul", want + 1.0, want)[0]  # 10 %: a real error


def test_compare_reports_shape_and_dtype_mismatch() -> None:
    ok, _, reason = compare("swiglu", torch.zeros(2, 3), torch.zeros(2, 4, dtype=torch.float64))
    assert not ok and "reference torch.float64[2, 4]" in reason


def test_a_crashing_implementation_is_a_fail_with_its_message() -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("EZ9999: aicore exception\ntraceback…")

    opdef = REGISTRY.get("swiglu")
    impl = Implementation("npu", broken, frozenset({"npu"}), portable=False)
    case = build_case("swiglu", small_shapes())
    result = check_impl(opdef, impl, case, torch.device("cpu"), opdef.reference.fn(*case.args))
    assert not result.ok and result.max_abs_err is None
    assert result.error == "RuntimeError: EZ9999: aicore exception"


@pytest.mark.parametrize("op", REGISTRY.names())
def test_default_shapes_build_for_every_op(op: str) -> None:
    case = build_case(op, OpShapes(num_tokens=4, intermediate_size=64, hidden_size=32))
    assert case.args


def test_shapes_follow_a_model_config() -> None:
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(
        hidden_size=2048,
        num_attention_heads=16,
        intermediate_size=10944,
        moe_intermediate_size=1408,
        n_routed_experts=64,
        num_experts_per_tok=6,
        scoring_func="softmax",
        rms_norm_eps=1e-6,
    )
    s = OpShapes.for_model(
        torch.bfloat16,
        num_kv_heads=16,
        k_head_dim=192,
        v_head_dim=128,
        block_size=128,
        hf_config=cfg,
    )
    assert (s.hidden_size, s.num_heads, s.intermediate_size) == (2048, 16, 1408)
    assert (s.softmax_experts, s.softmax_top_k, s.num_experts) == (64, 6, 256)
    assert (s.k_head_dim, s.v_head_dim, s.block_size) == (192, 128, 128)


def test_the_diagnostic_commands_are_registered() -> None:
    for name in ("cli.ops_check_cmd", "cli.doctor_cmd", "cli.plan_cmd"):
        assert name in cli_main._COMMAND_MODULES


def test_ops_check_passes_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(ops_check_cmd, ["ops-check"]) == 0
    out = capsys.readouterr().out
    assert "OP " in out and "| IMPL" in out and "MAX-ABS-ERR" in out
    assert out.count("| OK ") == len(REGISTRY.names()) and "0 FAIL" in out


def test_ops_check_takes_shapes_from_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run_command(
            ops_check_cmd,
            ["ops-check", "--config", str(PROD), "--model-id", "deepseek-v2-lite-chat"],
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "heads 16 q / 16 kv, head dims 192/128" in out


def test_ops_check_fails_when_an_implementation_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ASCEND_ROUTER_OP_IMPL", "swiglu=npu")
    assert run_command(ops_check_cmd, ["ops-check"]) == 1
    out = capsys.readouterr().out
    assert "swiglu" in out and "| npu " in out and "ModuleNotFoundError" in out
    assert "1 FAIL" in out


def test_ops_check_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(ops_check_cmd, ["ops-check", "--model-id", "x"]) == 2
    assert (
        run_command(ops_check_cmd, ["ops-check", "--config", str(PROD), "--model-id", "nope"]) == 2
    )
    assert "no model 'nope'" in capsys.readouterr().err
