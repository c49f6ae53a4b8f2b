"""Compile every CPU kernel this host can run into torch's extension cache (`setup.sh`).

Prints one line per kernel: compiled, or why it cannot run here (the engine then uses torch's
own kernels). Exits 1 when a kernel that can run here fails to compile.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from npu_ops.cpu_kernels import KERNELS, Kernel, load, unavailable


def _compile(kernel: Kernel) -> str:
    """Compile `kernel` (in a worker process); its line of the report."""
    began = time.perf_counter()
    try:
        load(kernel)
    except RuntimeError as exc:
        return f"{kernel.name}: FAILED: {exc}"
    return f"{kernel.name}: ready ({time.perf_counter() - began:.1f} s)"


def main() -> int:
    """Compile (or find cached) each kernel, one process per core (each compile is one g++ on
    one core); 1 if one that can run here failed, else 0."""
    runnable = []
    for kernel in KERNELS:
        reason = unavailable(kernel)
        if reason is not None:
            print(f"{kernel.name}: skipped ({reason})")
        else:
            runnable.append(kernel)
    workers = max(1, min(len(runnable), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers) as pool:
        lines = list(pool.map(_compile, runnable))
    for line in lines:
        print(line)
    return int(any(": FAILED: " in line for line in lines))


if __name__ == "__main__":
    sys.exit(main())
