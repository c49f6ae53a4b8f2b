"""The one place that knows which accelerator this process runs on.

Everything else asks this module for the device string, the `torch.distributed` backend, the
visible-devices variable and memory figures instead of writing device literals. `torch_npu` is
imported only when the NPU path is probed, so CPU and CUDA hosts never need it.
"""

from __future__ import annotations

import enum
import functools
import importlib.util
import logging
from dataclasses import dataclass

import psutil
import torch

logger = logging.getLogger(__name__)


class DeviceKind(str, enum.Enum):
    """Kinds of device the engine can run on."""

    NPU = "npu"
    CUDA = "cuda"
    CPU = "cpu"


@dataclass(frozen=True)
class Platform:
    """Facts about one platform.

    Attributes:
        kind: the device kind.
        dist_backend: `torch.distributed` backend for tensor/expert parallel groups
            (`hccl` on Ascend, `nccl` on CUDA, `gloo` on CPU).
        visible_devices_env: the environment variable that restricts visible devices
            (`ASCEND_RT_VISIBLE_DEVICES` on Ascend, per the CANN runtime docs).
        ray_resource: the Ray resource name one rank asks for (`NPU`, `GPU`, or `CPU`).
    """

    kind: DeviceKind
    dist_backend: str
    visible_devices_env: str | None
    ray_resource: str

    def device(self, index: int = 0) -> torch.device:
        """The torch device for local device `index` (always `cpu` on CPU)."""
        if self.kind is DeviceKind.CPU:
            return torch.device("cpu")
        return torch.device(self.kind.value, index)

    def device_count(self) -> int:
        """Number of visible accelerator devices (1 on CPU: the host)."""
        if self.kind is DeviceKind.CPU:
            return 1
        return int(getattr(torch, self.kind.value).device_count())

    def memory_info(self, index: int = 0) -> tuple[int, int]:
        """Free and total memory in bytes of device `index` (host memory on CPU)."""
        if self.kind is DeviceKind.CPU:
            vm = psutil.virtual_memory()
            return int(vm.available), int(vm.total)
        free, total = getattr(torch, self.kind.value).mem_get_info(index)
        return int(free), int(total)

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory measurement (no-op on CPU)."""
        if self.kind is not DeviceKind.CPU:
            mod = getattr(torch, self.kind.value)
            mod.empty_cache()
            mod.reset_peak_memory_stats()

    def peak_memory_allocated(self) -> int:
        """Peak bytes allocated by torch on the current device since the last reset (0 on CPU)."""
        if self.kind is DeviceKind.CPU:
            return 0
        return int(getattr(torch, self.kind.value).max_memory_allocated())

    def preferred_dtype(self) -> torch.dtype:
        """Fastest accurate dtype: bfloat16 on NPU/CUDA and on CPUs with native bf16 math
        (AVX512-BF16 or AMX), else float32."""
        if self.kind is not DeviceKind.CPU:
            return torch.bfloat16
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        return torch.bfloat16 if native else torch.float32

    def synchronize(self) -> None:
        """Wait for queued device work (no-op on CPU)."""
        if self.kind is not DeviceKind.CPU:
            getattr(torch, self.kind.value).synchronize()


_PLATFORMS = {
    DeviceKind.NPU: Platform(DeviceKind.NPU, "hccl", "ASCEND_RT_VISIBLE_DEVICES", "NPU"),
    DeviceKind.CUDA: Platform(DeviceKind.CUDA, "nccl", "CUDA_VISIBLE_DEVICES", "GPU"),
    DeviceKind.CPU: Platform(DeviceKind.CPU, "gloo", None, "CPU"),
}


def npu_available() -> bool:
    """True when `torch_npu` is installed and reports at least one NPU.

    Importing `torch_npu` registers the `torch.npu` namespace; it is only attempted when the
    package is installed, so CPU and CUDA hosts never import it.
    """
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch_npu  # noqa: F401  (registers torch.npu)

    return bool(torch.npu.is_available())


ASCEND_950_SOC_VERSION = 260
"""`torch_npu.npu.get_soc_version()` of Ascend 950PR/950DT (vLLM-Ascend's `AscendDeviceType.A5`;
220-225 are Atlas A2, 250-255 Atlas A3: vllm_ascend/utils.py `get_ascend_device_type`)."""


@functools.cache
def npu_soc_version() -> int | None:
    """The NPU's SoC version number (`torch_npu.npu.get_soc_version()`), or None where
    `torch_npu` is not installed."""
    try:
        import torch_npu
    except ImportError:
        return None

    return int(torch_npu.npu.get_soc_version())


def is_ascend_950() -> bool:
    """True on Ascend 950PR/950DT, whose cube units multiply FP8 and MXFP4/MXFP8 operands
    (`torch_npu.npu_quant_matmul`'s G-B, B-B and MX modes); False elsewhere, Atlas A2/A3
    included."""
    return npu_soc_version() == ASCEND_950_SOC_VERSION


@functools.cache
def current_platform() -> Platform:
    """Detect the platform once per process: NPU, then CUDA, then CPU."""
    if npu_available():
        kind = DeviceKind.NPU
    elif torch.cuda.is_available():
        kind = DeviceKind.CUDA
    else:
        kind = DeviceKind.CPU
    logger.info("platform: %s", kind.value)
    return _PLATFORMS[kind]


def platform_for(kind: str) -> Platform:
    """The platform record for a kind name (`npu`, `cuda`, `cpu`); ValueError if unknown."""
    try:
        return _PLATFORMS[DeviceKind(kind)]
    except ValueError:
        raise ValueError(f"unknown device kind {kind!r}; expected one of npu, cuda, cpu") from None
