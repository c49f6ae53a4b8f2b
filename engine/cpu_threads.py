"""The engine's CPU intra-op threads (`engine.num_threads`, `engine.single_thread_max_tokens`).

Ray sets `OMP_NUM_THREADS` to a replica's (fractional) CPU reservation, i.e. 1, so the engine
sets its threads itself; on an accelerator it leaves torch's alone.
"""

from __future__ import annotations

import os

import torch

from configs.engine_config import EngineConfig
from npu_ops.platform import DeviceKind, Platform


class CpuThreads:
    """Sets torch's intra-op threads at start-up and per step.

    Args:
        config: `num_threads` (None: every host core) and `single_thread_max_tokens`.
        platform: the device platform (threads are set on CPU only).
    """

    def __init__(self, config: EngineConfig, platform: Platform) -> None:
        on_cpu = platform.kind is DeviceKind.CPU
        self.num_threads = (config.num_threads or os.cpu_count() or 1) if on_cpu else 0
        self.single_thread_max_tokens = config.single_thread_max_tokens
        if self.num_threads:
            torch.set_num_threads(self.num_threads)

    def for_step(self, num_tokens: int) -> None:
        """Before a step (or a graph capture) of `num_tokens` tokens: one thread for a step of
        at most `single_thread_max_tokens` tokens, else `num_threads` (CPU only)."""
        if self.num_threads and self.single_thread_max_tokens:
            small = num_tokens <= self.single_thread_max_tokens
            torch.set_num_threads(1 if small else self.num_threads)
