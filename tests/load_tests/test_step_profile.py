"""`load_tests.step_profile` at toy sizes: a tiny Llama, eager, a few steps (the real run loads
SmolLM2 int4 with graphs, too slow for a unit test)."""

from __future__ import annotations

from pathlib import Path

from fixtures.tiny_checkpoints import make_tiny_checkpoint
from load_tests.step_profile import CLASSES, build_parser, run


def test_every_batch_size_is_timed_and_split_into_its_classes(tmp_path: Path) -> None:
    checkpoint = str(make_tiny_checkpoint("llama", tmp_path / "llama", real_vocab=False))
    args = build_parser().parse_args(
        ["--checkpoint", checkpoint, "--dtype", "float32", "--weight-quantization", "none"]
        + ["--activation-quantization", "none", "--output-quantization", "none"]
        + ["--batch-sizes", "1", "2", "--prompt-len", "4", "--steps", "3", "--profile-steps", "2"]
    )
    got = run(args)
    assert [b["batch"] for b in got["per_batch"]] == [1, 2]
    for batch in got["per_batch"]:
        assert batch["step_ms_median"] > 0 and batch["torch_ops_per_step"] > 0
        classes = batch["ms_per_class"]
        assert set(classes) == set(CLASSES)
        # the labelled stages were found in the profile (the sampler and metadata are labelled
        # by patching the functions the engine calls)
        assert classes["sampling"] > 0 and classes["metadata"] > 0 and classes["gemm"] > 0
