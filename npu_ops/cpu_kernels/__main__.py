"""Compile every CPU kernel this host can run into torch's extension cache (`setup.sh`).

Prints one line per kernel: compiled, or why it cannot run here (the engine then uses torch's
own kernels). Exits 1 when a kernel that can run here fails to compile.
"""

from __future__ import annotations

import sys
import time

from npu_ops.cpu_kernels import KERNELS, load, unavailable


def main() -> int:
    """Compile (or find cached) each kernel; 1 if one that can run here failed, else 0."""
    failed = 0
    for kernel in KERNELS:
        reason = unavailable(kernel)
        if reason is not None:
            print(f"{kernel.name}: skipped ({reason})")
            continue
        began = time.perf_counter()
        try:
            load(kernel)
        except RuntimeError as exc:
            print(f"{kernel.name}: FAILED: {exc}")
            failed = 1
            continue
        print(f"{kernel.name}: ready ({time.perf_counter() - began:.1f} s)")
    return failed


if __name__ == "__main__":
    sys.exit(main())
