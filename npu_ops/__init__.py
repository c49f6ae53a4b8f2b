"""Platform layer (cpu / cuda / npu) and fused ops; `torch_npu` is imported only on the NPU path."""
