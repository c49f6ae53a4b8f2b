"""Doctor checks of the hardware side: npu-smi, driver/firmware, cards, device files, visibility."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from operate.doctor.npu_smi import COMMAND_NOT_FOUND, NpuSmiInfo, Runner, parse_npu_smi_info
from operate.doctor.report import Check, Status

CONTROL_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
DEVICE_FIX = (
    "run as root or a member of the HwHiAiUser group; in a container pass --device "
    "/dev/davinciN plus /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc"
)


@dataclass(frozen=True)
class HardwareView:
    """What the machine shows of Ascend hardware.

    Attributes:
        smi: the parsed `npu-smi info`, None when it did not run or parse.
        smi_error: why `smi` is None (command not found, exit status, unparsable output).
        smi_missing: `npu-smi` is not installed / not on PATH.
        davinci: `/dev/davinciN` device files.
    """

    smi: NpuSmiInfo | None
    smi_error: str
    smi_missing: bool
    davinci: tuple[Path, ...]

    @property
    def has_npu(self) -> bool:
        """Any sign of an Ascend NPU: cards listed by npu-smi or davinci device files."""
        return bool(self.davinci) or bool(self.smi and self.smi.cards)


def davinci_devices(dev_dir: Path) -> tuple[Path, ...]:
    """The card device files `davinciN` under `dev_dir`, by card number (not the control
    devices such as `davinci_manager`)."""
    return tuple(
        sorted(
            (p for p in dev_dir.glob("davinci*") if p.name.removeprefix("davinci").isdigit()),
            key=lambda p: int(p.name.removeprefix("davinci")),
        )
    )


def look(runner: Runner, dev_dir: Path) -> HardwareView:
    """Run `npu-smi info` and list the davinci device files under `dev_dir`."""
    davinci = davinci_devices(dev_dir)
    result = runner(["npu-smi", "info"])
    if result.returncode == COMMAND_NOT_FOUND:
        return HardwareView(None, "npu-smi: command not found", True, davinci)
    if result.returncode != 0:
        first = (result.stderr or result.stdout).strip().splitlines()
        msg = f"npu-smi info exited {result.returncode}: {first[0] if first else ''}"
        return HardwareView(None, msg, False, davinci)
    try:
        return HardwareView(parse_npu_smi_info(result.stdout), "", False, davinci)
    except ValueError as exc:
        return HardwareView(None, f"npu-smi info: {exc}", False, davinci)


def check_driver(view: HardwareView, driver: str | None, firmware: str | None) -> Check:
    """npu-smi runs and lists cards; driver and firmware versions from their install records."""
    versions = f"driver {driver or 'unknown'}, firmware {firmware or 'unknown'}"
    if view.smi is not None:
        return Check(
            "npu-smi / driver",
            Status.PASS,
            f"npu-smi {view.smi.version or '?'} lists {len(view.smi.cards)} NPU(s); {versions}",
        )
    if not view.has_npu:
        return Check(
            "npu-smi / driver",
            Status.SKIP,
            f"no Ascend NPU on this machine ({view.smi_error}; no /dev/davinci* devices)",
        )
    if view.smi_missing:
        return Check(
            "npu-smi / driver",
            Status.FAIL,
            f"{len(view.davinci)} /dev/davinci* device(s) but {view.smi_error}; {versions}",
            "install the Ascend NPU driver and firmware (Ascend HDK) or put npu-smi on PATH; "
            "in a container mount /usr/local/bin/npu-smi and /usr/local/Ascend/driver",
        )
    return Check(
        "npu-smi / driver",
        Status.FAIL,
        f"{view.smi_error}; {versions}",
        "the driver is not loaded or the cards are not reachable: check `dmesg`, reinstall "
        "the driver matching the firmware, reboot",
    )


def check_cards(view: HardwareView) -> list[Check]:
    """One line per card: health (OK / Warning / Alarm / Critical) and HBM use."""
    checks = []
    for card in view.smi.cards if view.smi else ():
        mem = card.device_memory_mb
        used = f", memory {mem[0]} / {mem[1]} MB used" if mem else ""
        detail = f"{card.name} ({card.bus_id}), health {card.health}{used}"
        name = f"card {card.npu_id}"
        if card.health == "OK":
            checks.append(Check(name, Status.PASS, detail))
        elif card.health in ("Alarm", "Critical"):
            checks.append(
                Check(
                    name,
                    Status.FAIL,
                    detail,
                    f"keep work off this card (leave {card.npu_id} out of "
                    f"ASCEND_RT_VISIBLE_DEVICES) and read `npu-smi info -t health -i "
                    f"{card.npu_id}` for the alarm codes",
                )
            )
        else:
            checks.append(
                Check(
                    name,
                    Status.WARN,
                    detail,
                    f"read `npu-smi info -t health -i {card.npu_id}` for the warning codes",
                )
            )
    return checks


def check_device_files(view: HardwareView, dev_dir: Path) -> Check:
    """Read/write access to `/dev/davinciN` and the control devices torch_npu opens."""
    if not view.davinci:
        status = Status.FAIL if view.has_npu else Status.SKIP
        return Check("device files", status, f"no {dev_dir}/davinci* devices", DEVICE_FIX)
    wanted = [*view.davinci, *(dev_dir / name for name in CONTROL_DEVICES)]
    missing = [p.name for p in wanted if not p.exists()]
    denied = [p.name for p in wanted if p.exists() and not os.access(p, os.R_OK | os.W_OK)]
    if missing or denied:
        problems = "; ".join(
            part
            for part in (
                f"missing: {', '.join(missing)}" if missing else "",
                f"no read/write access: {', '.join(denied)}" if denied else "",
            )
            if part
        )
        return Check("device files", Status.FAIL, problems, DEVICE_FIX)
    return Check(
        "device files",
        Status.PASS,
        f"{len(view.davinci)} davinci device(s) and {', '.join(CONTROL_DEVICES)} read/write",
    )


def check_visible_devices(env: Mapping[str, str], view: HardwareView) -> Check:
    """`ASCEND_RT_VISIBLE_DEVICES` names cards that exist (logical ids of npu-smi)."""
    raw = env.get("ASCEND_RT_VISIBLE_DEVICES")
    name = "ASCEND_RT_VISIBLE_DEVICES"
    if raw is None:
        status = Status.PASS if view.has_npu else Status.SKIP
        return Check(name, status, "unset: every card is visible")
    ids = [part.strip() for part in raw.split(",") if part.strip()]
    if not all(i.isdigit() for i in ids):
        return Check(name, Status.FAIL, f"{raw!r} is not a list of card ids", "e.g. 0,1,2,3")
    known = {c.npu_id for c in view.smi.cards} if view.smi else set()
    unknown = [i for i in ids if known and int(i) not in known]
    if unknown:
        return Check(
            name,
            Status.FAIL,
            f"{raw!r} names card(s) {', '.join(unknown)}; npu-smi lists {sorted(known)}",
            "list only cards that `npu-smi info` shows",
        )
    return Check(name, Status.PASS, f"{raw!r}: {len(ids)} card(s) visible")
