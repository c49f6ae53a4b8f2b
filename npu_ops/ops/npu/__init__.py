"""The `npu` implementations: thin calls into `torch_npu`'s fused Ascend kernels.

`torch_npu` is imported when an op runs (`npu_ops.ops.npu.module.torch_npu`), never at import
time, so CPU and CUDA hosts import this package without it. Each function takes the op's
signature (see the references in `npu_ops.ops`) and converts to the layout the kernel documents.
"""
