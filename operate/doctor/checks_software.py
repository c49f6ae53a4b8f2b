"""Doctor checks of the software side: CANN, set_env.sh, torch ↔ torch_npu, Python, HCCL."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from operate.doctor.install_files import CannInstall
from operate.doctor.probes import TorchNpuProbe
from operate.doctor.report import Check, Status
from operate.doctor.torch_pairing import (
    packages_for_torch,
    published_cann,
    release,
    supported_pythons,
)

SET_ENV = "source /usr/local/Ascend/ascend-toolkit/set_env.sh"


def _missing(has_npu: bool) -> Status:
    return Status.FAIL if has_npu else Status.SKIP


def check_cann(cann: CannInstall | None, toolkit: Path, has_npu: bool) -> Check:
    """A CANN toolkit is installed and its version readable."""
    if cann is None:
        return Check(
            "CANN toolkit",
            _missing(has_npu),
            f"no version.cfg or ascend_toolkit_install.info under {toolkit}",
            "install the CANN toolkit and ops packages (Ascend-cann-toolkit, "
            "Ascend-cann-kernels) matching torch_npu",
        )
    return Check("CANN toolkit", Status.PASS, f"CANN {cann.version} ({cann.source})")


def check_set_env(env: Mapping[str, str], has_npu: bool) -> Check:
    """`set_env.sh` was sourced: it exports `ASCEND_TOOLKIT_HOME` / `ASCEND_HOME_PATH`."""
    found = [k for k in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH") if env.get(k)]
    if found:
        return Check("set_env.sh", Status.PASS, ", ".join(f"{k}={env[k]}" for k in found))
    return Check(
        "set_env.sh",
        _missing(has_npu),
        "ASCEND_TOOLKIT_HOME and ASCEND_HOME_PATH are unset: CANN's set_env.sh was not sourced",
        f"{SET_ENV} in this shell, the container entrypoint and the Ray workers' environment",
    )


def _install_hint(torch_version: str) -> str:
    pairs = packages_for_torch(torch_version)
    if not pairs:
        return (
            f"torch {release(torch_version)} has no published torch_npu; install a torch "
            "release from the compatibility table (e.g. torch==2.7.1 with torch-npu==2.7.1)"
        )
    pkg, cann = pairs[0]
    return f"pip install torch-npu=={pkg} (published with CANN {cann})"


def check_torch_pairing(
    probe: TorchNpuProbe, torch_version: str, cann: str | None, has_npu: bool
) -> Check:
    """torch_npu is built for this torch release, and for the installed CANN."""
    name = "torch / torch_npu"
    if not probe.installed:
        return Check(
            name,
            _missing(has_npu),
            f"torch {torch_version}; torch_npu not installed",
            _install_hint(torch_version),
        )
    if probe.version is None:
        return Check(
            name,
            Status.FAIL,
            f"torch_npu fails to import: {probe.error}",
            f"{SET_ENV}, then check that CANN matches torch_npu",
        )
    if release(probe.version) != release(torch_version):
        return Check(
            name,
            Status.FAIL,
            f"torch_npu {probe.version} is built for torch {release(probe.version)}, "
            f"torch is {torch_version}",
            f"pip install torch=={release(probe.version)}, or {_install_hint(torch_version)}",
        )
    want = published_cann(probe.version)
    pair = f"torch {torch_version} + torch_npu {probe.version}"
    if want is None:
        return Check(
            name,
            Status.WARN,
            f"{pair} is not in Ascend's published table",
            _install_hint(torch_version),
        )
    if cann is not None and not cann.startswith(want):
        return Check(
            name,
            Status.WARN,
            f"{pair} is published with CANN {want}; CANN {cann} installed",
            f"install CANN {want}, or the torch_npu published for CANN {cann}",
        )
    return Check(name, Status.PASS, f"{pair} (published with CANN {want})")


def check_torch_npu_devices(probe: TorchNpuProbe, has_npu: bool) -> Check:
    """`torch.npu.is_available()` and the device count."""
    name = "torch.npu"
    if not probe.installed or probe.version is None:
        return Check(name, _missing(has_npu), "torch_npu not importable; CPU fallback")
    if probe.available and probe.device_count > 0:
        return Check(name, Status.PASS, f"is_available() True, device_count() {probe.device_count}")
    return Check(
        name,
        Status.FAIL if has_npu else Status.WARN,
        f"is_available() {probe.available}, device_count() {probe.device_count} {probe.error}",
        "check the driver (npu-smi info), device permissions and ASCEND_RT_VISIBLE_DEVICES",
    )


def check_python(python: tuple[int, int], torch_version: str) -> Check:
    """This Python is one torch_npu publishes wheels for with this torch."""
    current = f"{python[0]}.{python[1]}"
    supported = supported_pythons(torch_version)
    if supported is None:
        return Check("python", Status.WARN, f"Python {current}; torch {torch_version} unknown")
    if current not in supported:
        return Check(
            "python",
            Status.WARN,
            f"Python {current}; torch_npu for torch {release(torch_version)} supports "
            f"{', '.join(supported)}",
            f"use Python {supported[-1]}",
        )
    return Check("python", Status.PASS, f"Python {current} (supported: {', '.join(supported)})")


def check_hccl(env: Mapping[str, str]) -> Check:
    """HCCL variables in effect (tensor/expert-parallel collectives use their defaults else)."""
    hccl = {k: v for k, v in env.items() if k.startswith("HCCL_")}
    if not hccl:
        return Check("HCCL", Status.PASS, "no HCCL_* variables set (defaults)")
    return Check("HCCL", Status.PASS, ", ".join(f"{k}={v}" for k, v in sorted(hccl.items())))
