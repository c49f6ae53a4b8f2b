"""systemd unit files that run a Ray cluster of Ascend nodes and deploy the router onto it.

Three units (syntax: systemd.unit(5), systemd.service(5), systemd.exec(5)):

- `ascend-router-ray-head.service`: `ray start --head --block` on the head node;
- `ascend-router-ray-worker.service`: `ray start --block --address=HEAD:PORT` on every other node;
- `ascend-router-serve.service` (head only): a oneshot `serve deploy CONFIG` that runs after the
  head is up (`Requires=`/`After=` the head unit, and an `ExecStartPre=` loop that waits for
  `ray status` and the dashboard that `serve deploy` talks to).

`ray start --block` keeps the `ray` process in the foreground and exits non-zero when one of the
processes it started dies, so `Restart=on-failure` restarts the node. systemd restarts the units
that require a unit it restarts automatically, so a head restart re-runs `serve deploy` (the
Serve applications live in the head's GCS and die with it).

CANN's environment: systemd cannot source a shell script, and an `EnvironmentFile=` would not do
either: `set_env.sh` computes its paths and appends to `LD_LIBRARY_PATH`, `PYTHONPATH` and `PATH`,
while systemd reads environment files without shell expansion. So `ExecStart=` runs
`/bin/bash -c "source set_env.sh && exec ray start ..."`: `exec` leaves `ray` as the service's
main process. Per-node settings (`HCCL_IF_IP`, `HCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`, a
different `ASCEND_RT_VISIBLE_DEVICES`) go in the optional `ENV_FILE`, read after the unit's own
`Environment=` lines and so overriding them.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HEAD_UNIT = "ascend-router-ray-head.service"
WORKER_UNIT = "ascend-router-ray-worker.service"
SERVE_UNIT = "ascend-router-serve.service"
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
ENV_FILE = "/etc/default/ascend-router"
DEFAULT_PORT = 6379
MAX_NPUS = 4096  # bound of --npus: a node has 8 or 16 cards; this only stops absurd values
DASHBOARD_PORT = 8265
WAIT_TRIES, WAIT_EVERY_S = 120, 5
ASCEND_GROUP = "HwHiAiUser"  # owner group of /dev/davinci*, created by the Ascend driver install

Role = Literal["head", "worker"]
_PLAIN_WORD = re.compile(r"[\w@+=:,./-]+")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*"
)


@dataclass(frozen=True)
class NodeUnits:
    """What the units of one node are made from.

    Attributes:
        role: `head` (GCS, dashboard, Serve controller, and the `serve deploy` unit) or `worker`.
        config: absolute path of the Serve YAML that the head deploys.
        bin_dir: directory holding the `ray`, `serve` and `python` of the environment in which
            ascend-router is installed (Ray's workers run that interpreter).
        workdir: the services' working directory; relative paths in the config resolve there.
        head_host: the head's IP on the cluster network: workers join it; on the head it becomes
            `--node-ip-address`. None on a head lets Ray pick the address.
        head_port: the head's GCS port (`ray start --port`).
        npus: NPUs this node gives Ray as the `NPU` resource; 0 for a node without cards.
        visible_devices: `ASCEND_RT_VISIBLE_DEVICES` of the node (card ids); empty leaves it unset.
        set_env: CANN's `set_env.sh`, sourced before `ray start`; empty to source nothing.
        user: the account the services run as; None runs them as root.
    """

    role: Role
    config: Path
    bin_dir: Path
    workdir: Path
    head_host: str | None = None
    head_port: int = DEFAULT_PORT
    npus: int = 8
    visible_devices: tuple[int, ...] = tuple(range(8))
    set_env: str = SET_ENV
    user: str | None = None

    def __post_init__(self) -> None:
        if self.role == "worker" and not self.head_host:
            raise ValueError("a worker needs the head's address: --head-address HOST:PORT")
        if self.role == "head" and self.head_host and not _is_ip(self.head_host):
            raise ValueError(
                f"on the head, --head-address needs this node's IP on the cluster network (it "
                f"becomes ray start --node-ip-address), not {self.head_host!r}"
            )
        if self.head_host and _is_ip(self.head_host):
            ip = ipaddress.ip_address(self.head_host)
            if ip.is_unspecified or (self.role == "head" and ip.is_loopback):
                raise ValueError(
                    f"--head-address {self.head_host}: workers on other nodes cannot reach the "
                    "head there; give the head's IP on the cluster network"
                )
        if not 0 <= self.npus <= MAX_NPUS:
            raise ValueError(f"npus must be in 0..{MAX_NPUS}, got {self.npus}")
        if self.visible_devices and len(self.visible_devices) != self.npus:
            raise ValueError(
                f"{self.npus} NPU(s) but ASCEND_RT_VISIBLE_DEVICES lists "
                f"{len(self.visible_devices)} card(s) ({self.visible_devices}): make them agree"
            )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_head_address(value: str) -> tuple[str, int]:
    """`HOST:PORT` (the port defaults to 6379) as (host, port); HOST is an IPv4 address or a
    hostname.

    Raises:
        ValueError: an IPv6 address (bracketed or not: these units write `HOST:PORT` for Ray,
            which does not take IPv6 there), a URL, a host with spaces or quotes, or a port that
            is not a number in 1..65535.
    """
    if "/" in value:
        raise ValueError(
            f"head address {value!r}: give HOST:PORT (the GCS address, no URL scheme or path), "
            "e.g. 10.0.0.1:6379"
        )
    if value.startswith("[") or value.count(":") > 1:
        raise ValueError(
            f"head address {value!r}: IPv6 is not supported here; give the head's IPv4 address "
            "or hostname, e.g. 10.0.0.1:6379"
        )
    host, sep, port = value.partition(":")
    if not sep:
        port = str(DEFAULT_PORT)
    if (
        not _HOSTNAME.fullmatch(host)
        or not port.isascii()
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise ValueError(
            f"head address {value!r} is not HOST:PORT (an IPv4 address or hostname, and a port "
            "in 1..65535), e.g. 10.0.0.1:6379"
        )
    return host, int(port)


def systemd_word(arg: str) -> str:
    """One argument of an `Exec*=` command line, quoted as systemd.service(5) "Command lines" reads
    it: double quotes with C escapes for `\\` and `"`, `$$` for a literal `$` (no variable
    substitution) and `%%` for a literal `%` (no specifier expansion)."""
    if _PLAIN_WORD.fullmatch(arg):
        return arg
    quoted = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return f'"{quoted}"'


def exec_line(argv: Sequence[str]) -> str:
    """An `Exec*=` value that runs `argv` (an absolute executable, then its arguments)."""
    return " ".join(systemd_word(a) for a in argv)


def _bash(script: str) -> str:
    return exec_line(["/bin/bash", "-c", script])


def ray_start_argv(node: NodeUnits) -> list[str]:
    """`ray start --block` with this node's role, address and `NPU` resource."""
    argv = [str(node.bin_dir / "ray"), "start", "--block"]
    if node.role == "head":
        argv += ["--head", f"--port={node.head_port}", f"--dashboard-port={DASHBOARD_PORT}"]
        if node.head_host:
            argv.append(f"--node-ip-address={node.head_host}")
    else:
        argv.append(f"--address={node.head_host}:{node.head_port}")
    return [*argv, "--resources", json.dumps({"NPU": node.npus})]


def _ray_script(node: NodeUnits) -> str:
    start = "exec " + shlex.join(ray_start_argv(node))
    return f"source {shlex.quote(node.set_env)} && {start}" if node.set_env else start


def _wait_for_head_script(node: NodeUnits) -> str:
    gcs = f"{node.head_host or '127.0.0.1'}:{node.head_port}"
    status = shlex.join([str(node.bin_dir / "ray"), "status", f"--address={gcs}"])
    probe = (
        "import urllib.request; "
        f'urllib.request.urlopen("http://127.0.0.1:{DASHBOARD_PORT}/api/version", timeout=5)'
    )
    dashboard = shlex.join([str(node.bin_dir / "python"), "-c", probe])
    return (
        f"for i in $(seq {WAIT_TRIES}); do "
        f"{status} >/dev/null 2>&1 && {dashboard} 2>/dev/null && exit 0; sleep {WAIT_EVERY_S}; "
        f"done; echo 'Ray head at {gcs} or its dashboard did not come up' >&2; exit 1"
    )


def render_unit(comments: Sequence[str], sections: dict[str, list[tuple[str, str]]]) -> str:
    """A unit file: `#` comment lines, then `[Section]` blocks of `Key=value` lines (a key may
    repeat, as `Environment=` does)."""
    lines = [f"# {c}".rstrip() for c in comments]
    for name, entries in sections.items():
        lines += ["", f"[{name}]", *(f"{k}={v}" for k, v in entries)]
    return "\n".join(lines) + "\n"


def _identity(node: NodeUnits, unit: str) -> list[tuple[str, str]]:
    entries: list[tuple[str, str]] = []
    if node.user:
        entries += [("User", node.user), ("SupplementaryGroups", ASCEND_GROUP)]
    # a path setting: specifiers expand (`%%` is a literal `%`), quotes would stay in the path
    entries.append(("WorkingDirectory", str(node.workdir).replace("%", "%%")))
    return [*entries, ("SyslogIdentifier", unit.removesuffix(".service"))]


def _environment(node: NodeUnits) -> list[tuple[str, str]]:
    entries: list[tuple[str, str]] = []
    if node.visible_devices:
        devices = ",".join(str(d) for d in node.visible_devices)
        entries.append(("Environment", f"ASCEND_RT_VISIBLE_DEVICES={devices}"))
    return [*entries, ("EnvironmentFile", f"-{ENV_FILE}")]


def ray_unit(node: NodeUnits) -> str:
    """The head or worker unit: `ray start --block` under CANN's environment, restarted on
    failure, logging to journald as `SyslogIdentifier=` its unit name."""
    name = HEAD_UNIT if node.role == "head" else WORKER_UNIT
    what = "Ray head node" if node.role == "head" else f"Ray worker of head {node.head_host}"
    service = [
        ("Type", "simple"),
        *_identity(node, name),
        *_environment(node),
        ("ExecStart", _bash(_ray_script(node))),
        ("Restart", "on-failure"),
        ("RestartSec", "10"),
        ("TimeoutStopSec", "60"),
        # Ray opens a socket or file per worker and connection (Ray's docs ask for 65536)
        ("LimitNOFILE", "65536"),
    ]
    comments = [
        f"{name}: {what}, {node.npus} NPU(s) as the Ray resource NPU.",
        "Written by `ascend-router systemd`; see docs/multi-node.md.",
        "systemd cannot source CANN's set_env.sh, so ExecStart sources it in bash, then execs ray.",
        f"Per-node variables (HCCL_IF_IP=..., HCCL_SOCKET_IFNAME=...) go in {ENV_FILE}.",
    ]
    return render_unit(
        comments,
        {
            "Unit": [
                ("Description", f"ascend-router: {what}"),
                ("Wants", "network-online.target"),
                ("After", "network-online.target"),
            ],
            "Service": service,
            "Install": [("WantedBy", "multi-user.target")],
        },
    )


def serve_unit(node: NodeUnits) -> str:
    """The head's oneshot unit: wait for the head and its dashboard, then `serve deploy` the
    config. Restarting it re-applies the config (an in-place, rolling update)."""
    assert node.role == "head", "only the head deploys the Serve config"
    deploy = [
        str(node.bin_dir / "serve"),
        "deploy",
        str(node.config),
        f"--address=http://127.0.0.1:{DASHBOARD_PORT}",
    ]
    service = [
        ("Type", "oneshot"),
        ("RemainAfterExit", "yes"),
        *_identity(node, SERVE_UNIT),
        ("ExecStartPre", _bash(_wait_for_head_script(node))),
        ("ExecStart", exec_line(deploy)),
        ("TimeoutStartSec", str(WAIT_TRIES * WAIT_EVERY_S + 120)),
    ]
    comments = [
        f"{SERVE_UNIT}: serve deploy {node.config} once the Ray head is up.",
        "Written by `ascend-router systemd`; see docs/multi-node.md.",
        f"`systemctl restart {SERVE_UNIT}` re-applies the config after you edit it.",
    ]
    return render_unit(
        comments,
        {
            "Unit": [
                ("Description", "ascend-router: serve deploy the router config"),
                ("Requires", HEAD_UNIT),
                ("After", HEAD_UNIT),
            ],
            "Service": service,
            "Install": [("WantedBy", "multi-user.target")],
        },
    )


def unit_files(node: NodeUnits) -> dict[str, str]:
    """File name → text of every unit of this node (head: ray and serve; worker: ray)."""
    if node.role == "head":
        return {HEAD_UNIT: ray_unit(node), SERVE_UNIT: serve_unit(node)}
    return {WORKER_UNIT: ray_unit(node)}


def write_text_file(path: Path, text: str) -> None:
    """Write `text` to `path`, creating missing parent directories.

    Shared by the generators' CLIs (`ascend-router systemd`, `ascend-router kuberay`), which
    turn the error into one line and exit status 2.

    Raises:
        ValueError: the file cannot be written (a directory in the way, a parent that is a
            file, no permission, a read-only or missing file system); the message names it.
    """
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise ValueError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_units(node: NodeUnits, out_dir: Path) -> list[Path]:
    """Write this node's units into `out_dir` (created if missing); returns their paths.

    Raises:
        ValueError: `out_dir` is not a directory or a unit cannot be written.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"cannot write units into {out_dir}: not a directory")
    written = []
    for name, text in unit_files(node).items():
        path = out_dir / name
        write_text_file(path, text)
        written.append(path)
    return written
