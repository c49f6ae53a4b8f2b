"""Versions of the Ascend driver, firmware and CANN toolkit, from their install records.

Locations under the install root (default `/usr/local/Ascend`), as the Ascend install guides and
the standard container mounts use them:

- driver: `driver/version.info`, a `Version=23.0.6` line;
- firmware: `firmware/version.info`, a `Version=7.1.0.6.220` line;
- CANN toolkit (`ascend-toolkit/latest`): `version.cfg` with lines such as
  `toolkit_running_version=[7.3.0.1.231:8.0.RC2]` (the CANN version follows the colon), or
  `<arch>-linux/ascend_toolkit_install.info` with a `version=8.0.RC2` line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/usr/local/Ascend")
TOOLKIT = "ascend-toolkit/latest"
_CFG_KEYS = ("toolkit_running_version", "runtime_running_version", "toolkit_installed_version")
_CFG_VALUE = re.compile(r"\[(?:[^:\]]*:)?([^\]]+)\]")


def _key_values(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def read_version_info(path: Path) -> str | None:
    """The `Version=` value of a driver/firmware `version.info`, None if absent."""
    try:
        values = _key_values(path)
    except OSError:
        return None
    return values.get("Version") or values.get("version") or None


@dataclass(frozen=True)
class CannInstall:
    """A found CANN toolkit: its version and the file it was read from."""

    version: str
    source: Path


def read_cann_version(toolkit: Path) -> CannInstall | None:
    """The CANN version installed at `toolkit` (e.g. `/usr/local/Ascend/ascend-toolkit/latest`).

    Returns:
        The version from `version.cfg` or, failing that, `*-linux/ascend_toolkit_install.info`;
        None when neither exists or holds a version.
    """
    cfg = toolkit / "version.cfg"
    try:
        values = _key_values(cfg)
    except OSError:
        values = {}
    for key in _CFG_KEYS:
        if key in values and (m := _CFG_VALUE.search(values[key])):
            return CannInstall(m.group(1).strip(), cfg)
    for info in sorted(toolkit.glob("*-linux/ascend_toolkit_install.info")):
        try:
            version = _key_values(info).get("version")
        except OSError:
            continue
        if version:
            return CannInstall(version, info)
    return None
