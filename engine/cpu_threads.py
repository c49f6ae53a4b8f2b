"""The engine's CPU intra-op threads (`engine.num_threads`, `engine.single_thread_max_tokens`)
and their priority (`engine.thread_niceness`).

Ray sets `OMP_NUM_THREADS` to a replica's (fractional) CPU reservation, i.e. 1, so the engine
sets its threads itself; on an accelerator it leaves torch's alone. Linux niceness is per thread
(sched(7)), and a thread starts with its creator's: set on the engine thread before its first
parallel region, it holds for the OpenMP team that region starts (libgomp keeps one team per
thread that starts regions), and for nothing else of the process.
"""

from __future__ import annotations

import logging
import os
import threading

import torch

from configs.engine_config import EngineConfig
from npu_ops.platform import DeviceKind, Platform

logger = logging.getLogger(__name__)


class CpuThreads:
    """Sets torch's intra-op threads at start-up and per step, and the calling thread's
    niceness (`engine.thread_niceness`) at start-up. Built on the engine thread, first.

    Args:
        config: `num_threads` (None: every host core), `single_thread_max_tokens` and
            `thread_niceness`.
        platform: the device platform (threads are set on CPU only).
    """

    def __init__(self, config: EngineConfig, platform: Platform) -> None:
        if config.thread_niceness is not None:
            set_thread_niceness(config.thread_niceness)
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


def set_thread_niceness(niceness: int) -> bool:
    """Set the calling thread's Linux niceness (threads it starts later inherit it); True if
    set. Lowering it below the current value needs CAP_SYS_NICE: without it, or off Linux, a
    warning is logged and the niceness is left as it is."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except (OSError, AttributeError) as exc:  # no privilege, or no per-thread priorities
        logger.warning("engine.thread_niceness %d not set (%s); it stays as it was", niceness, exc)
        return False
    logger.info("engine thread niceness set to %d", niceness)
    return True
