"""`ascend-router ops-check`: every op implementation of this device run against its reference.

`shapes.OpShapes` sizes the inputs, `samples.build_case` builds them, `preflight.run_preflight`
calls each implementation and compares it with the pure-torch reference (`npu_ops.ops`).
"""
