"""`ascend-router doctor` against recorded npu-smi outputs and fake Ascend installs in tmp_path."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import npu_smi_samples as smi
import pytest
from cli_helpers import run_command

from cli import doctor_cmd
from configs.serve_file import load_app_config
from operate.doctor.install_files import read_cann_version, read_version_info
from operate.doctor.npu_smi import CommandResult, parse_npu_smi_info
from operate.doctor.probes import RayNode, TorchNpuProbe
from operate.doctor.report import Check, Status, exit_status
from operate.doctor.run import DoctorContext, run_doctor

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
GiB = 1 << 30


def test_parse_healthy_8_card_910b() -> None:
    info = parse_npu_smi_info(smi.HEALTHY_8X910B)
    assert info.version == "23.0.6" and len(info.cards) == 8
    card = info.cards[7]
    assert (card.npu_id, card.name, card.health, card.bus_id) == (7, "910B3", "OK", "0000:42:00.0")
    assert card.device_memory_mb == (3393, 65536)


def test_parse_unhealthy_cards_and_310p_without_hbm() -> None:
    health = [c.health for c in parse_npu_smi_info(smi.ONE_WARNING_ONE_ALARM).cards]
    assert health == ["OK", "OK", "OK", "Warning", "OK", "Alarm", "OK", "OK"]
    (card,) = parse_npu_smi_info(smi.ATLAS_300I_310P3).cards
    assert card.hbm_total_mb is None and card.device_memory_mb == (1074, 21534)


def test_parse_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="not npu-smi output"):
        parse_npu_smi_info("dcmi module initialize failed. ret is -8005\n")


def _runner(result: CommandResult) -> Callable[[Sequence[str]], CommandResult]:
    def run(argv: Sequence[str]) -> CommandResult:
        assert list(argv) == ["npu-smi", "info"]
        return result

    return run


def _ascend_root(tmp_path: Path, cfg: bool = True) -> Path:
    root = tmp_path / "Ascend"
    (root / "driver").mkdir(parents=True)
    (root / "driver" / "version.info").write_text("Version=23.0.6\nascendhal_version=7.35.19\n")
    (root / "firmware").mkdir()
    (root / "firmware" / "version.info").write_text("Version=7.1.0.6.220\n")
    toolkit = root / "ascend-toolkit" / "latest"
    (toolkit / "aarch64-linux").mkdir(parents=True)
    if cfg:
        (toolkit / "version.cfg").write_text(
            "runtime_running_version=[7.5.0.1.129:8.3.RC1]\n"
            "toolkit_running_version=[7.5.0.1.129:8.3.RC1]\n"
        )
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.3.RC1\narch=aarch64\n"
    )
    return root


def _dev_dir(tmp_path: Path, cards: int = 8, control: bool = True) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(cards):
        (dev / f"davinci{i}").touch()
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc") if control else ():
        (dev / name).touch()
    return dev


NPU_PROBE = TorchNpuProbe(True, "2.6.0.post3", True, 8, tuple([60 * GiB] * 8))


def npu_host(tmp_path: Path, **overrides: object) -> DoctorContext:
    """A healthy Atlas 800T A2: 8 × 910B3, CANN 8.3.RC1, torch 2.6.0 + torch_npu 2.6.0.post3."""
    defaults: dict[str, Callable[[], object]] = {
        "runner": lambda: _runner(CommandResult(0, smi.HEALTHY_8X910B)),
        "ascend_root": lambda: _ascend_root(tmp_path),
        "dev_dir": lambda: _dev_dir(tmp_path),
        "env": lambda: {"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"},
        "ray_address": lambda: None,
        "torch_npu": lambda: lambda: NPU_PROBE,
        "ray": lambda: lambda address: None,
        "python": lambda: (3, 10),
        "torch_version": lambda: "2.6.0",
        "cuda_available": lambda: lambda: False,
    }
    fields = {k: overrides[k] if k in overrides else make() for k, make in defaults.items()}
    return DoctorContext(**fields)  # type: ignore[arg-type]


def cpu_host(tmp_path: Path, **overrides: object) -> DoctorContext:
    """This kind of machine: no driver, no devices, no CANN, no torch_npu."""
    defaults: dict[str, Callable[[], object]] = {
        "runner": lambda: _runner(CommandResult(127, "", "npu-smi: command not found")),
        "ascend_root": lambda: tmp_path / "nothing",
        "dev_dir": lambda: _dev_dir(tmp_path, cards=0, control=False),
        "env": dict,
        "torch_npu": lambda: lambda: TorchNpuProbe(installed=False),
        "torch_version": lambda: "2.6.0+cpu",
    }
    fields = {k: overrides[k] if k in overrides else make() for k, make in defaults.items()}
    return npu_host(tmp_path, **{**overrides, **fields})


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_healthy_npu_host_passes_everything(tmp_path: Path) -> None:
    # prod.yaml needs 19 NPUs at its minimum replicas and 26 at its maximum (DeepSeek-V4-Flash
    # takes a whole 8-card node, Qwen2.5-32B 4 per replica): four 8-card nodes
    nodes = [RayNode(f"10.0.0.{i}", 8.0) for i in (1, 2, 3, 4)]
    checks = run_doctor(npu_host(tmp_path, ray=lambda a: nodes), load_app_config(PROD))
    assert [c for c in checks if c.status is not Status.PASS] == []
    named = by_name(checks)
    assert "driver 23.0.6, firmware 7.1.0.6.220" in named["npu-smi / driver"].detail
    assert "CANN 8.3.RC1" in named["CANN toolkit"].detail
    assert "published with CANN 8.3.RC1" in named["torch / torch_npu"].detail
    assert named["card 5"].detail.endswith("memory 3393 / 65536 MB used")
    assert "4 NPUs" not in named["ray"].detail and exit_status(checks) == 0


def test_unhealthy_cards_warn_and_fail(tmp_path: Path) -> None:
    ctx = npu_host(tmp_path, runner=_runner(CommandResult(0, smi.ONE_WARNING_ONE_ALARM)))
    named = by_name(run_doctor(ctx))
    assert named["card 3"].status is Status.WARN and "-i 3" in named["card 3"].fix
    assert (
        named["card 5"].status is Status.FAIL and "ASCEND_RT_VISIBLE_DEVICES" in named["card 5"].fix
    )
    assert exit_status(named.values()) == 1


def test_cpu_machine_reports_the_fallback_and_exits_zero(tmp_path: Path) -> None:
    checks = run_doctor(cpu_host(tmp_path), load_app_config(PROD))
    named = by_name(checks)
    assert named["platform"].status is Status.WARN
    assert "no Ascend NPU on this machine: serving falls back to CPU" in named["platform"].detail
    assert named["npu-smi / driver"].status is Status.SKIP
    assert "command not found" in named["npu-smi / driver"].detail
    assert all(not c.fix for c in checks if c.status is Status.SKIP)
    assert exit_status(checks) == 0


def test_driver_missing_on_a_host_with_npu_devices_fails(tmp_path: Path) -> None:
    ctx = cpu_host(tmp_path, dev_dir=_dev_dir(tmp_path, cards=8))
    named = by_name(run_doctor(ctx))
    assert named["npu-smi / driver"].status is Status.FAIL
    assert (
        "8 /dev/davinci* device(s) but npu-smi: command not found"
        in named["npu-smi / driver"].detail
    )
    assert named["platform"].status is Status.FAIL
    assert named["torch / torch_npu"].status is Status.FAIL
    assert "torch-npu==2.6.0" in named["torch / torch_npu"].fix


def test_cann_version_from_cfg_or_install_info(tmp_path: Path) -> None:
    toolkit = _ascend_root(tmp_path, cfg=False) / "ascend-toolkit" / "latest"
    found = read_cann_version(toolkit)
    assert found is not None and found.version == "8.3.RC1"
    assert found.source.name == "ascend_toolkit_install.info"
    (toolkit / "version.cfg").write_text("toolkit_running_version=[7.3.0.1.231:8.0.RC2]\n")
    assert read_cann_version(toolkit).version == "8.0.RC2"
    assert read_cann_version(tmp_path / "missing") is None
    assert read_version_info(tmp_path / "missing.info") is None


def test_missing_cann_and_unsourced_set_env_fail_on_an_npu_host(tmp_path: Path) -> None:
    ctx = npu_host(tmp_path, ascend_root=tmp_path / "empty", env={})
    named = by_name(run_doctor(ctx))
    assert named["CANN toolkit"].status is Status.FAIL
    assert named["set_env.sh"].status is Status.FAIL and "set_env.sh" in named["set_env.sh"].fix


@pytest.mark.parametrize(
    ("torch_version", "torch_npu", "status", "text"),
    [
        ("2.6.0", "2.6.0.post3", Status.PASS, "published with CANN 8.3.RC1"),
        ("2.7.1", "2.6.0.post3", Status.FAIL, "built for torch 2.6.0"),
        ("2.6.0", "2.6.0", Status.WARN, "published with CANN 8.2.RC1; CANN 8.3.RC1 installed"),
        ("2.6.0", "2.6.0.post99", Status.WARN, "not in Ascend's published table"),
    ],
)
def test_torch_torch_npu_pairing(
    tmp_path: Path, torch_version: str, torch_npu: str, status: Status, text: str
) -> None:
    probe = dataclasses.replace(NPU_PROBE, version=torch_npu)
    ctx = npu_host(tmp_path, torch_version=torch_version, torch_npu=lambda: probe)
    check = by_name(run_doctor(ctx))["torch / torch_npu"]
    assert check.status is status and text in check.detail


def test_device_files_and_visible_devices(tmp_path: Path) -> None:
    ctx = npu_host(
        tmp_path,
        dev_dir=_dev_dir(tmp_path, control=False),
        env={"ASCEND_TOOLKIT_HOME": "x", "ASCEND_RT_VISIBLE_DEVICES": "0,9"},
    )
    named = by_name(run_doctor(ctx))
    assert named["device files"].status is Status.FAIL
    assert "missing: davinci_manager, devmm_svm, hisi_hdc" in named["device files"].detail
    assert named["ASCEND_RT_VISIBLE_DEVICES"].status is Status.FAIL
    assert "card(s) 9" in named["ASCEND_RT_VISIBLE_DEVICES"].detail


def test_config_against_devices_and_free_memory(tmp_path: Path) -> None:
    probe = TorchNpuProbe(True, "2.6.0.post3", True, 2, (60 * GiB, 5 * GiB))
    named = by_name(run_doctor(npu_host(tmp_path, torch_npu=lambda: probe), load_app_config(PROD)))
    assert named["deepseek-v2-lite-chat: parallel"].status is Status.FAIL
    assert "needs 4 NPUs, 2 visible" in named["deepseek-v2-lite-chat: parallel"].detail
    assert named["qwen2.5-7b-instruct: memory"].status is Status.PASS
    assert "1 of 2 card(s)" in named["qwen2.5-7b-instruct: memory"].detail
    assert named["deepseek-v2-lite-chat: memory"].status is Status.FAIL


def test_memory_from_npu_smi_when_torch_npu_is_absent(tmp_path: Path) -> None:
    ctx = npu_host(
        tmp_path,
        runner=_runner(CommandResult(0, smi.BUSY_CARD)),
        torch_npu=lambda: TorchNpuProbe(installed=False),
    )
    check = by_name(run_doctor(ctx, load_app_config(PROD)))["qwen2.5-7b-instruct: memory"]
    assert check.status is Status.PASS and "7 of 8 card(s)" in check.detail


def test_ray_view(tmp_path: Path) -> None:
    config = load_app_config(PROD)
    no_npu = npu_host(tmp_path, ray=lambda a: [RayNode("10.0.0.1", 0.0)])
    check = by_name(run_doctor(no_npu, config))["ray"]
    assert check.status is Status.FAIL and "deepseek-v2-lite-chat needs 4" in check.detail

    def unreachable(address: str | None) -> None:
        raise ConnectionError("Could not find any running Ray instance")

    ctx = dataclasses.replace(no_npu, ray=unreachable, ray_address="10.0.0.9:6379")
    check = by_name(run_doctor(ctx))["ray"]
    assert check.status is Status.WARN and "10.0.0.9:6379" in check.detail


def test_doctor_help_names_ray_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_command(doctor_cmd, ["doctor", "--help"])
    assert "RAY_ADDRESS" in capsys.readouterr().out


def test_doctor_command_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(doctor_cmd, ["doctor", "--config", str(PROD)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("STATUS | CHECK")
    assert "falls back to CPU" in out and "qwen2.5-7b-instruct: memory" in out


def test_doctor_command_rejects_a_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [{model_id: a}]\n")
    assert run_command(doctor_cmd, ["doctor", "--config", str(bad)]) == 2
    assert "invalid config" in capsys.readouterr().err
