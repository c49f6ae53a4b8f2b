"""Gather every doctor check, with every probe of the machine injectable."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from configs import envs
from configs.model_config import RouterAppConfig
from operate.doctor import checks_cluster, checks_config, checks_hardware, checks_software
from operate.doctor.install_files import (
    DEFAULT_ROOT,
    TOOLKIT,
    read_cann_version,
    read_version_info,
)
from operate.doctor.npu_smi import Runner, run_command
from operate.doctor.probes import LOCAL, RayNode, TorchNpuProbe, probe_ray, probe_torch_npu
from operate.doctor.report import Check, Status

logger = logging.getLogger(__name__)
MiB = 1 << 20


@dataclass(frozen=True)
class DoctorContext:
    """Where the doctor looks; tests replace any of these.

    Attributes:
        runner: runs external commands (`npu-smi info`).
        ascend_root: the Ascend install root (driver/, firmware/, ascend-toolkit/).
        dev_dir: where the davinci device files live.
        env: the `ASCEND_*` / `HCCL_*` environment (`configs.envs.ascend_environment`).
        ray_address: `RAY_ADDRESS`.
        torch_npu: probe of torch_npu in this process.
        ray: probe of an existing Ray cluster (given `ray_address`): every alive node's NPUs
            and, from a task pinned to each node, what it runs.
        python: this interpreter's (major, minor).
        torch_version: `torch.__version__`.
        cuda_available: whether CUDA would be the fallback instead of CPU.
    """

    runner: Runner = run_command
    ascend_root: Path = DEFAULT_ROOT
    dev_dir: Path = Path("/dev")
    env: Mapping[str, str] = field(default_factory=envs.ascend_environment)
    ray_address: str | None = field(default_factory=envs.ray_address)
    torch_npu: Callable[[], TorchNpuProbe] = probe_torch_npu
    ray: Callable[[str | None], list[RayNode] | None] = probe_ray
    python: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)
    torch_version: str = torch.__version__
    cuda_available: Callable[[], bool] = torch.cuda.is_available


def _platform(probe: TorchNpuProbe, has_npu: bool, cuda: bool) -> Check:
    if probe.available and probe.device_count > 0:
        return Check("platform", Status.PASS, f"Ascend NPU x{probe.device_count} (hccl)")
    fallback = "CUDA (nccl)" if cuda else "CPU (gloo backend, host memory, engine dtype float32)"
    if has_npu:
        return Check(
            "platform",
            Status.FAIL,
            f"Ascend hardware present but torch cannot use it: serving would fall back to "
            f"{fallback}",
            "fix the FAIL lines below (driver, CANN, torch_npu)",
        )
    return Check(
        "platform", Status.WARN, f"no Ascend NPU on this machine: serving falls back to {fallback}"
    )


def _free_bytes(probe: TorchNpuProbe, view: checks_hardware.HardwareView) -> list[int] | None:
    if probe.free_bytes:
        return list(probe.free_bytes)
    if view.smi and view.smi.cards:
        mems = [c.device_memory_mb for c in view.smi.cards]
        return [(total - used) * MiB for used, total in (m for m in mems if m)]
    return None


def _ray_checks(ctx: DoctorContext, config: RouterAppConfig | None, has_npu: bool) -> list[Check]:
    if ctx.ray_address == LOCAL:
        return [
            Check(
                "ray",
                Status.SKIP,
                "RAY_ADDRESS=local asks Ray to start a new instance, which the doctor never does: "
                "no cluster checked (set RAY_ADDRESS=HEAD:6379 to check one)",
            )
        ]
    try:
        nodes = ctx.ray(ctx.ray_address)
    except Exception as exc:  # an unreachable cluster is a finding, not a crash
        logger.debug("ray probe failed", exc_info=True)
        return [
            Check(
                "ray",
                Status.WARN,
                f"RAY_ADDRESS={ctx.ray_address!r}: no cluster answered "
                f"({type(exc).__name__}: {exc})",
                "start the cluster, check RAY_ADDRESS (the head's HOST:6379) and the firewall, "
                "or unset RAY_ADDRESS",
            )
        ]
    checks = [checks_config.check_ray(nodes, config, has_npu)]
    if nodes:
        checks += checks_cluster.check_cluster(nodes, config, has_npu)
    return checks


def run_doctor(ctx: DoctorContext, config: RouterAppConfig | None = None) -> list[Check]:
    """Every check, in report order: platform, hardware, software, the Ray cluster (each node,
    the config's NPUs across nodes, versions across nodes), then the config's needs here."""
    view = checks_hardware.look(ctx.runner, ctx.dev_dir)
    probe = ctx.torch_npu()
    has_npu = view.has_npu or probe.device_count > 0
    toolkit = ctx.ascend_root / TOOLKIT
    cann = read_cann_version(toolkit)
    driver = read_version_info(ctx.ascend_root / "driver" / "version.info")
    firmware = read_version_info(ctx.ascend_root / "firmware" / "version.info")
    checks = [
        _platform(probe, has_npu, ctx.cuda_available()),
        checks_hardware.check_driver(view, driver, firmware),
        *checks_hardware.check_cards(view),
        checks_hardware.check_device_files(view, ctx.dev_dir),
        checks_hardware.check_visible_devices(ctx.env, view),
        checks_software.check_cann(cann, toolkit, has_npu),
        checks_software.check_set_env(ctx.env, has_npu),
        checks_software.check_torch_pairing(
            probe, ctx.torch_version, cann.version if cann else None, has_npu
        ),
        checks_software.check_torch_npu_devices(probe, has_npu),
        checks_software.check_python(ctx.python, ctx.torch_version),
        checks_software.check_hccl(ctx.env),
        *_ray_checks(ctx, config, has_npu),
    ]
    if config is not None:
        devices = probe.device_count or (len(view.smi.cards) if view.smi else len(view.davinci))
        checks += checks_config.check_parallel(config, devices, has_npu)
        checks += checks_config.check_memory(config, _free_bytes(probe, view) if has_npu else None)
    # a check that does not apply here needs no fix
    return [replace(c, fix="") if c.status is Status.SKIP else c for c in checks]
