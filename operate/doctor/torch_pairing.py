"""torch ↔ torch_npu ↔ CANN pairing, from Ascend's published compatibility table.

Source: Ascend Extension for PyTorch, "Version Matching" — TorchNPU version mapping table and
"PyTorch and Python versions" (github.com/Ascend/pytorch / gitcode.com/Ascend/pytorch, README
and docs). A torch_npu package is built for exactly one PyTorch release: its version is that
release's, optionally with `.postN` (e.g. torch_npu 2.6.0.post3 is for torch 2.6.0), and each
package release is validated against one CANN release.
"""

from __future__ import annotations

import re

# (torch_npu package, torch, CANN), active releases of the published table.
TORCH_NPU_TABLE: tuple[tuple[str, str, str], ...] = (
    ("2.12.0", "2.12.0", "9.1.0"),
    ("2.11.0", "2.11.0", "9.1.0"),
    ("2.10.0.post4", "2.10.0", "9.1.0"),
    ("2.9.0.post6", "2.9.0", "9.1.0"),
    ("2.7.1.post8", "2.7.1", "9.1.0"),
    ("2.10.0", "2.10.0", "9.0.0"),
    ("2.9.0.post2", "2.9.0", "9.0.0"),
    ("2.8.0.post4", "2.8.0", "9.0.0"),
    ("2.7.1.post4", "2.7.1", "9.0.0"),
    ("2.9.0", "2.9.0", "8.5.0"),
    ("2.8.0.post2", "2.8.0", "8.5.0"),
    ("2.7.1.post2", "2.7.1", "8.5.0"),
    ("2.6.0.post5", "2.6.0", "8.5.0"),
    ("2.8.0", "2.8.0", "8.3.RC1"),
    ("2.7.1", "2.7.1", "8.3.RC1"),
    ("2.6.0.post3", "2.6.0", "8.3.RC1"),
    ("2.1.0.post17", "2.1.0", "8.3.RC1"),
    ("2.6.0", "2.6.0", "8.2.RC1"),
    ("2.5.1.post1", "2.5.1", "8.2.RC1"),
    ("2.1.0.post13", "2.1.0", "8.2.RC1"),
    ("2.5.1", "2.5.1", "8.1.RC1"),
    ("2.4.0.post4", "2.4.0", "8.1.RC1"),
    ("2.3.1.post6", "2.3.1", "8.1.RC1"),
    ("2.1.0.post12", "2.1.0", "8.1.RC1"),
    ("2.4.0.post2", "2.4.0", "8.0.0"),
    ("2.3.1.post4", "2.3.1", "8.0.0"),
    ("2.1.0.post10", "2.1.0", "8.0.0"),
    ("2.4.0", "2.4.0", "8.0.RC3"),
    ("2.3.1.post2", "2.3.1", "8.0.RC3"),
    ("2.1.0.post8", "2.1.0", "8.0.RC3"),
    ("2.3.1", "2.3.1", "8.0.RC2"),
    ("2.2.0.post2", "2.2.0", "8.0.RC2"),
    ("2.1.0.post6", "2.1.0", "8.0.RC2"),
)

# PyTorch release → Python minor versions torch_npu supports with it.
PYTHON_FOR_TORCH: dict[str, tuple[str, ...]] = {
    "2.13": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.12": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.11": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.10": ("3.10", "3.11", "3.12", "3.13"),
    "2.9": ("3.10", "3.11", "3.12", "3.13"),
    "2.8": ("3.9", "3.10", "3.11", "3.12", "3.13"),
    "2.7": ("3.9", "3.10", "3.11", "3.12", "3.13"),
    "2.6": ("3.9", "3.10", "3.11"),
    "2.5": ("3.9", "3.10", "3.11"),
    "2.4": ("3.8", "3.9", "3.10", "3.11"),
    "2.3": ("3.8", "3.9", "3.10", "3.11"),
    "2.2": ("3.8", "3.9", "3.10"),
    "2.1": ("3.8", "3.9", "3.10", "3.11"),
}

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def release(version: str) -> str:
    """`major.minor.patch` of a version string (`2.6.0+cpu` and `2.6.0.post3` → `2.6.0`)."""
    m = _RELEASE.match(version.strip())
    return ".".join(m.groups()) if m else version.strip()


def packages_for_torch(torch_version: str) -> list[tuple[str, str]]:
    """(torch_npu package, CANN) pairs published for this torch release, newest CANN first."""
    base = release(torch_version)
    return [(pkg, cann) for pkg, t, cann in TORCH_NPU_TABLE if t == base]


def published_cann(torch_npu_version: str) -> str | None:
    """The CANN release a torch_npu package was published for, None if not in the table."""
    version = torch_npu_version.split("+")[0].strip()
    for pkg, _torch, cann in TORCH_NPU_TABLE:
        if pkg == version:
            return cann
    return None


def supported_pythons(torch_version: str) -> tuple[str, ...] | None:
    """Python minor versions torch_npu supports for this torch release, None if unknown."""
    major_minor = ".".join(release(torch_version).split(".")[:2])
    return PYTHON_FOR_TORCH.get(major_minor)
