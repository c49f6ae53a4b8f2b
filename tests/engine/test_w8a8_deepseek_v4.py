"""DeepSeek-V4 in ModelSlim's W8A8 layout (`engine.quantization.deepseek_v4`, the Ascend
`…-w8a8-mtp` checkpoints): `ascend-router quantize` writes it from the tiny float V4 with its MTP
layer, the engine loads it through the W8A8 path (the MTP layer's block int8 as the decoder
layers', `load_model(..., mtp=True)`) and serves it like the float original, within the tolerance
below; speculative decoding with its MTP layer leaves its greedy output unchanged.

Tolerance. A V4 step makes discrete choices from continuous values: the learned routers' top-k
experts (layers 2 and 3 of the tiny model) and the indexer's top-k compressed entries (the
ratio-4 layers). Where int8 rounding flips one of them the logits jump (measured: 15-40% of the
positions of random prompts come after a flip, with errors up to 0.15 of the largest logit), so
the dense families' bound (`test_w8a8.py`: max |logit - float logit| <= 0.02 x max |float
logit|, measured there about 0.01) is asserted where every choice so far agrees with the float
model's (measured 0.012-0.017 over five seeds), and over all positions the mean error (<= 0.004 x
max |float logit|, as for the dense families; measured about 0.002). Greedy tokens must equal the
float model's up to the first step whose float top-2 margin is within twice that step's logit
error (no flip is possible past that margin), and in full for most prompts (measured 14 of 16).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import assert_blocks_free, greedy, run_staggered, run_to_completion
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4GroupedLinear

from cli.main import main as cli_main
from configs.engine_config import EngineConfig
from engine.checkpoint_ref import CheckpointRef
from engine.deepseek_v4.attention import V4Attention
from engine.llm_engine import LLMEngine
from engine.model_loader import load_model
from engine.quantization import QUANT_DESCRIPTION_FILE
from engine.quantization.checkpoint_names import CheckpointMapped
from engine.quantization.deepseek_v4 import INT8_LINEARS
from engine.quantization.experts import W8A8DynamicExperts
from engine.quantization.linear import W8A8DynamicLinear
from engine.spec_decode.mtp_v4 import V4MtpLayer
from engine.step_input import StepInput
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint

BLOCK = 16
NUM_PROMPTS = 16
NEW_TOKENS = 6
MAX_REL_ERR = 0.02
"""max |logit - float logit| / max |float logit| before any discrete choice flips."""
MEAN_REL_ERR = 0.004
"""mean |logit - float logit| / max |float logit| over all positions."""
MIN_UNFLIPPED = 0.5
"""Share of positions that come before any flip, at least (else the bound checks little)."""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(tiny float V4 with an MTP layer `mtp.0.*`, its W8A8 copy written by the CLI)."""
    root = tmp_path_factory.mktemp("v4-w8a8")
    src = make_tiny_checkpoint("deepseek_v4", root / "float", real_vocab=False, mtp_layers=1)
    dst = root / "w8a8"
    assert cli_main(["quantize", str(src), str(dst), "--mode", "w8a8_dynamic"]) == 0
    return src, dst


def _engine(path: Path) -> LLMEngine:
    return LLMEngine(
        str(path),
        EngineConfig(
            dtype="float32",
            block_size=BLOCK,
            num_kv_blocks=64,
            max_model_len=256,
            max_num_batched_tokens=256,
            max_num_seqs=NUM_PROMPTS,
        ),
    )


def _description(path: Path) -> dict[str, str]:
    return json.loads((path / QUANT_DESCRIPTION_FILE).read_text())


def test_layout_is_modelslims_v4_w8a8(checkpoints: tuple[Path, Path]) -> None:
    _, dst = checkpoints
    desc = _description(dst)
    assert desc.pop("model_quant_type") == "W8A8_DYNAMIC"
    with safe_open(dst / "quant_model_weights.safetensors", framework="pt") as f:
        stored = {name: f.get_slice(name) for name in f.keys()}
        assert set(desc) == set(stored)  # every tensor described
        # DeepSeek's names, as the V4 release and vllm-ascend's ModelSlim config expect them
        assert {"embed.weight", "head.weight", "norm.weight", "hc_head_fn"} <= set(desc)
        assert not any(name.startswith("model.") for name in desc)
        int8 = {n.removesuffix(".weight") for n in desc if n.endswith(".weight")}
        int8 = {n for n in int8 if desc[f"{n}.weight"] == "W8A8_DYNAMIC"}
        for layer in int8:
            assert stored[f"{layer}.weight"].get_dtype() == "I8"
            rows = stored[f"{layer}.weight"].get_shape()[0]
            for suffix in ("weight_scale", "weight_offset"):
                assert stored[f"{layer}.{suffix}"].get_shape() == [rows, 1]
                assert desc[f"{layer}.{suffix}"] == "W8A8_DYNAMIC"
    # a ratio-4 layer (with compressor and indexer), and the MTP layer (sliding-window only)
    for prefix, attn in (("layers.1.", ("indexer.wq_b",)), ("mtp.0.", ())):
        want = {
            *(f"{prefix}attn.{p}" for p in ("wq_a", "wq_b", "wkv", "wo_b", *attn)),
            *(f"{prefix}ffn.shared_experts.w{i}" for i in (1, 2, 3)),
            *(f"{prefix}ffn.experts.{e}.w{i}" for e in range(4) for i in (1, 2, 3)),
        }
        assert {n for n in int8 if n.startswith(prefix)} == want
    for float_tensor in (
        "layers.1.attn.wo_a.weight",
        "layers.1.attn.compressor.wkv.weight",
        "layers.1.attn.compressor.wgate.weight",
        "layers.1.attn.indexer.weights_proj.weight",
        "layers.1.attn.indexer.compressor.wkv.weight",
        "layers.1.ffn.gate.weight",
        "layers.0.ffn.gate.tid2eid",
        "layers.1.attn.attn_sink",
        "layers.1.hc_attn_fn",
        "layers.1.attn.kv_norm.weight",
        "mtp.0.e_proj.weight",
        "mtp.0.h_proj.weight",
        "mtp.0.hc_head_fn",
    ):
        assert desc[float_tensor] == "FLOAT", float_tensor
    assert len(int8) == sum(bool(INT8_LINEARS.search(f"{n}.weight")) for n in int8)


class _Choices:
    """Records every discrete choice of a V4 step per layer and position: the learned routers'
    experts (forward hooks on `mlp.gate`) and the indexer's entries (op `lightning_indexer`,
    through a recording op table on each `V4Attention`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.made: dict[str, torch.Tensor] = {}
        for name, module in model.named_modules():
            if name.endswith("mlp.gate"):  # hash routers too: their choices never differ
                module.register_forward_hook(self._router(name))
            if isinstance(module, V4Attention):
                module._ops = _RecordingOps(module._ops, self.made, name)

    def _router(self, name: str) -> Callable[..., None]:
        def hook(_: torch.nn.Module, __: Any, out: tuple[torch.Tensor, ...]) -> None:
            self.made[name] = out[2].sort(dim=-1).values

        return hook

    def first_difference(self, other: _Choices, num_positions: int) -> int:
        """The first position where any choice of the last step differs (else its length)."""
        first = num_positions
        for name, made in self.made.items():
            differs = (made != other.made[name]).any(dim=-1).nonzero()
            if differs.numel():
                first = min(first, int(differs[0, 0]))
        return first


class _RecordingOps:
    def __init__(self, ops: Any, made: dict[str, torch.Tensor], name: str) -> None:
        self._ops, self._made, self._name = ops, made, name

    def __getattr__(self, op: str) -> Any:
        fn = getattr(self._ops, op)
        if op != "lightning_indexer":
            return fn

        def record(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = fn(*args, **kwargs)
            self._made[self._name] = out.sort(dim=-1).values
            return out

        return record


def _logits(engine: LLMEngine, tokens: list[int]) -> torch.Tensor:
    """`[len(tokens), vocab]` logits of one prefill through the executor (fresh blocks)."""
    blocks = list(range(-(-len(tokens) // BLOCK)))
    step = StepInput(
        tokens,
        [0],
        [len(tokens)],
        [blocks],
        list(range(len(tokens))),
        [len(tokens)],
        sliding_tables=(tuple(blocks),),
    )
    return engine.executor.execute(step).logits


def _greedy(engine: LLMEngine, prompts: list[list[int]]) -> Iterator[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, greedy(NEW_TOKENS))
    out = run_to_completion(engine)
    assert_blocks_free(engine)
    return (out[str(i)] for i in range(len(prompts)))


def test_w8a8_v4_serves_like_the_float_original(checkpoints: tuple[Path, Path]) -> None:
    src, dst = checkpoints
    ref, quant = _engine(src), _engine(dst)
    model = quant.executor.model  # type: ignore[attr-defined]
    kinds = [type(m) for m in model.modules()]
    # 4 layers x (wq_a, wq_b, wkv, wo_b, 3 shared-expert linears) + 2 indexers; 4 expert sets
    assert kinds.count(W8A8DynamicLinear) == 4 * 7 + 2
    assert kinds.count(W8A8DynamicExperts) == 4
    attn = model.model.layers[1].self_attn
    assert attn.o_a_proj.weight.dtype == torch.float32  # the grouped projection stays float
    assert type(attn.compressor.kv_proj) is torch.nn.Linear

    rng = random.Random(0)
    lengths = [rng.randrange(8, 40) for _ in range(NUM_PROMPTS)]
    prompts = [[1, *(rng.randrange(3, SMALL_VOCAB) for _ in range(n))] for n in lengths]
    want, got = list(_greedy(ref, prompts)), list(_greedy(quant, prompts))

    ref_choices, quant_choices = _Choices(ref.executor.model), _Choices(model)  # type: ignore[attr-defined]
    unflipped, errors, scale, positions = [], [], 0.0, 0
    for prompt, w, g in zip(prompts, want, got):
        seq = prompt + w[:-1]  # the last NEW_TOKENS rows are the float model's greedy steps
        r, q = _logits(ref, seq), _logits(quant, seq)
        err = (q - r).abs()
        errors.append(err.flatten())
        scale = max(scale, r.abs().max().item())
        first = ref_choices.first_difference(quant_choices, len(seq))
        unflipped.append(err[:first].flatten())
        positions += len(seq)
        top2 = r.topk(2, dim=-1).values
        margin = top2[:, 0] - top2[:, 1]
        step_err = err.amax(dim=-1)
        for i, (a, b) in enumerate(zip(g, w)):
            if a != b:  # a flip needs a float margin the error can overcome
                row = len(prompt) - 1 + i
                assert margin[row] <= 2 * step_err[row] + 1e-5, (prompt, g, w)
                break
    before = torch.cat(unflipped)
    mean_err = torch.cat(errors).mean().item()
    same = sum(g == w for g, w in zip(got, want))
    vocab = ref.vocab_size
    print(
        f"\nW8A8 V4: max |logit| {scale:.3f}; before any flipped choice ({before.numel() // vocab}"
        f"/{positions} positions) max error {before.max().item() / scale:.4f} x that; mean "
        f"error {mean_err / scale:.5f} x; greedy {NEW_TOKENS} tokens equal for "
        f"{same}/{len(prompts)} prompts"
    )
    assert before.numel() >= MIN_UNFLIPPED * positions * vocab
    assert before.max().item() <= MAX_REL_ERR * scale
    assert mean_err <= MEAN_REL_ERR * scale
    assert same >= len(prompts) // 2
    for engine in (ref, quant):
        assert_blocks_free(engine)
        engine.shutdown()


def _rewrite(src: Path, dst: Path, edit: Callable[[dict[str, torch.Tensor], dict], None]) -> Path:
    """A copy of the quantised checkpoint with its tensors and description edited."""
    shutil.copytree(src, dst)
    weights = dst / "quant_model_weights.safetensors"
    tensors = load_file(weights)
    desc = _description(dst)
    edit(tensors, desc)
    save_file(tensors, weights, metadata={"format": "pt"})
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"] = dict.fromkeys(tensors, weights.name)
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    (dst / QUANT_DESCRIPTION_FILE).write_text(json.dumps(desc))
    return dst


def test_what_the_v4_path_refuses(
    checkpoints: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = checkpoints
    cpu = torch.device("cpu")

    def quantise_wo_a(tensors: dict[str, torch.Tensor], desc: dict) -> None:
        layer = "layers.0.attn.wo_a"
        weight = tensors[f"{layer}.weight"].float()
        scale = weight.abs().amax(dim=1, keepdim=True) / 127
        tensors[f"{layer}.weight"] = torch.round(weight / scale).to(torch.int8)
        tensors[f"{layer}.weight_scale"] = scale
        for suffix in ("weight", "weight_scale"):
            desc[f"{layer}.{suffix}"] = "W8A8_DYNAMIC"

    grouped = _rewrite(dst, tmp_path / "grouped", quantise_wo_a)
    with pytest.raises(ValueError, match=r"layers\.0\.attn\.wo_a is a DeepseekV4GroupedLinear"):
        load_model(CheckpointRef.from_path(grouped), torch.float32, cpu)

    def float_expert(_: dict[str, torch.Tensor], desc: dict) -> None:
        desc["layers.2.ffn.experts.1.w3.weight"] = "FLOAT"

    partial = _rewrite(dst, tmp_path / "partial", float_expert)
    with pytest.raises(ValueError, match=r"expert 1 \(part 1\) is not quantised"):
        load_model(CheckpointRef.from_path(partial), torch.float32, cpu)

    assert cli_main(["quantize", str(src), str(tmp_path / "static"), "--mode", "w8a8"]) == 2
    assert re.search(r"DeepSeek-V4 .* --mode w8a8_dynamic", capsys.readouterr().err)


def test_the_mtp_layers_int8_tensors_load_as_the_decoder_layers(
    checkpoints: tuple[Path, Path],
) -> None:
    src, dst = checkpoints
    model = load_model(CheckpointRef.from_path(dst), torch.float32, torch.device("cpu"), mtp=True)
    assert isinstance(model.mtp, V4MtpLayer) and isinstance(model.mtp, CheckpointMapped)
    block = model.mtp.block
    attn, mlp = block.self_attn, block.mlp
    for linear in (attn.q_a_proj, attn.q_b_proj, attn.kv_proj, attn.o_b_proj):
        assert isinstance(linear, W8A8DynamicLinear)
    for linear in (mlp.shared_experts.gate_proj, mlp.shared_experts.up_proj):
        assert isinstance(linear, W8A8DynamicLinear)
    assert isinstance(mlp.experts, W8A8DynamicExperts)
    assert type(attn.o_a_proj) is DeepseekV4GroupedLinear  # float, as in the decoder layers
    assert type(model.mtp.e_proj) is nn.Linear and type(model.mtp.h_proj) is nn.Linear

    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]

    def source(name: str) -> torch.Tensor:
        with safe_open(src / index[name], framework="pt") as f:
            return f.get_tensor(name).float()

    # the int8 codes times their scales give the float checkpoint's MTP weights back
    wq_a = attn.q_a_proj.weight.t().float() * attn.q_a_proj.weight_scale[:, None]
    step = attn.q_a_proj.weight_scale[:, None] / 2 + 1e-6
    assert bool(((wq_a - source("mtp.0.attn.wq_a.weight")).abs() <= step).all())
    inter = mlp.experts.intermediate_dim
    up = (
        mlp.experts.gate_up_proj[2].t()[inter:].float() * mlp.experts.gate_up_scale[2, inter:, None]
    )
    step = mlp.experts.gate_up_scale[2, inter:, None] / 2 + 1e-6
    assert bool(((up - source("mtp.0.ffn.experts.2.w3.weight")).abs() <= step).all())
    # the float tensors as stored
    assert torch.equal(model.mtp.e_proj.weight, source("mtp.0.e_proj.weight"))
    assert torch.equal(model.mtp.hc_head.hc_fn, source("mtp.0.hc_head_fn"))


@pytest.fixture(scope="module")
def agreeing(checkpoints: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The float checkpoint with the head's row 0 along a random direction (so that the target
    emits token 0 after about half of its hidden states and the MTP layer, through its own int8
    block, drafts it after about half of its own: drafts get accepted and rejected), quantised
    by the CLI."""
    src, _ = checkpoints
    root = tmp_path_factory.mktemp("v4-w8a8-mtp")
    shutil.copytree(src, root / "float")
    index = json.loads((root / "float/model.safetensors.index.json").read_text())["weight_map"]
    shard = root / "float" / index["head.weight"]
    tensors = load_file(shard)
    head = tensors["head.weight"]
    gen = torch.Generator().manual_seed(0)
    row = torch.randn(head.shape[1], generator=gen) * 4 * head.float().norm(dim=1).max()
    head[0] = row.to(head.dtype)
    save_file(tensors, shard, metadata={"format": "pt"})
    dst = root / "w8a8"
    assert cli_main(["quantize", str(root / "float"), str(dst), "--mode", "w8a8_dynamic"]) == 0
    return dst


def test_mtp_on_the_w8a8_checkpoint_leaves_greedy_output_unchanged(agreeing: Path) -> None:
    rng = random.Random(3)
    requests = [
        (str(i), [rng.randrange(3, SMALL_VOCAB) for _ in range(n)], greedy(16, ignore_eos=True))
        for i, n in enumerate((5, 23, 40, 70))
    ]
    out: dict[bool, dict[str, list[int]]] = {}
    for speculative in (None, {"method": "mtp", "num_speculative_tokens": 1}):
        engine = LLMEngine(
            str(agreeing),
            EngineConfig(
                speculative=speculative,
                dtype="float32",
                block_size=BLOCK,
                num_kv_blocks=64,
                max_model_len=256,
                max_num_batched_tokens=48,  # chunked: the 70-token prompt outruns the window
                max_num_seqs=4,
            ),
        )
        out[speculative is not None] = run_staggered(engine, requests, join_every=2)
        if speculative is not None:
            mtp = engine.executor.model.mtp  # type: ignore[attr-defined]
            assert isinstance(mtp.block.mlp.experts, W8A8DynamicExperts)
            assert isinstance(mtp.block.self_attn.kv_proj, W8A8DynamicLinear)
            stats = engine.stats().spec
            assert stats is not None and stats.num_drafts >= 20
            assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
        assert_blocks_free(engine)  # both pools
        engine.shutdown()
    assert out[True] == out[False]
    assert all(len(tokens) == 16 for tokens in out[True].values())
    assert any(0 in tokens and len(set(tokens)) > 2 for tokens in out[True].values())
