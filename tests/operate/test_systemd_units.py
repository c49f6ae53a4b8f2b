"""`ascend-router systemd`: the units it writes, read back as systemd reads them.

Unit files are parsed by a small reader that keeps repeated keys (systemd.unit(5)); `Exec*=`
lines are split as systemd.service(5) "Command lines" describes (specifiers, quotes with C
escapes, then `$$` → `$`), and the `bash -c` scripts inside them once more with `shlex`, so the
tests see the argv that would run. `systemd-analyze verify` checks the files too when it works
on this machine (no systemd as PID 1 is needed for it).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_command

from cli import main as cli_main
from cli import systemd_cmd
from operate.systemd_units import (
    HEAD_UNIT,
    SERVE_UNIT,
    WORKER_UNIT,
    NodeUnits,
    exec_line,
    parse_head_address,
)

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
BIN = Path(sys.executable).parent
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
Unit = dict[str, list[tuple[str, str]]]

_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "s": " "}


def read_unit(path: Path) -> Unit:
    """Sections → (key, value) pairs in file order; a key may repeat."""
    unit: Unit = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            assert section not in unit, f"{path.name}: [{section}] twice"
            unit[section] = []
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"{path.name}: stray line {line!r}"
        unit[section].append((key.strip(), value.strip()))
    return unit


def values(unit: Unit, section: str, key: str) -> list[str]:
    return [v for k, v in unit[section] if k == key]


def one(unit: Unit, section: str, key: str) -> str:
    (value,) = values(unit, section, key)
    return value


def systemd_argv(line: str) -> list[str]:
    """An `Exec*=` value as the argv systemd runs (the subset of the syntax the units use)."""
    assert "%" not in line.replace("%%", ""), "a lone % would be a specifier"
    line = line.replace("%%", "%")
    words: list[str] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        word, quote = "", None
        if line[i] in "\"'":
            quote, i = line[i], i + 1
        while i < len(line) and (quote or line[i] != " "):
            ch = line[i]
            if quote and ch == quote:
                i += 1
                break
            if ch == "\\":
                word += _ESCAPES[line[i + 1]]
                i += 2
                continue
            word += ch
            i += 1
        else:
            assert quote is None, f"unterminated quote in {line!r}"
        assert "$" not in word.replace("$$", ""), f"{word!r}: $ would substitute a variable"
        words.append(word.replace("$$", "$"))
    return words


def bash_script(line: str) -> str:
    argv = systemd_argv(line)
    assert argv[:2] == ["/bin/bash", "-c"] and len(argv) == 3, argv
    return argv[2]


def generate(tmp_path: Path, *argv: str) -> dict[str, Unit]:
    out = tmp_path / "units"
    common = ["--config", str(PROD), "-o", str(out), "--bin-dir", str(BIN)]
    assert run_command(systemd_cmd, ["systemd", *argv, *common]) == 0
    return {p.name: read_unit(p) for p in sorted(out.iterdir())}


def test_the_command_is_registered() -> None:
    assert "cli.systemd_cmd" in cli_main._COMMAND_MODULES


def test_head_runs_ray_start_head_under_cann_and_restarts_on_failure(tmp_path: Path) -> None:
    units = generate(tmp_path, "--role", "head", "--head-address", "10.0.0.1:6380")
    assert sorted(units) == sorted([HEAD_UNIT, SERVE_UNIT])
    head = units[HEAD_UNIT]
    assert set(head) == {"Unit", "Service", "Install"}
    assert one(head, "Unit", "After") == "network-online.target"
    assert one(head, "Service", "Restart") == "on-failure"
    assert one(head, "Service", "SyslogIdentifier") == "ascend-router-ray-head"
    assert one(head, "Install", "WantedBy") == "multi-user.target"
    env = values(head, "Service", "Environment")
    assert env == ["ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]
    assert one(head, "Service", "EnvironmentFile") == "-/etc/default/ascend-router"

    script = shlex.split(bash_script(one(head, "Service", "ExecStart")))
    assert script[:4] == ["source", SET_ENV, "&&", "exec"]
    ray = script[4:]
    assert ray[:3] == [str(BIN / "ray"), "start", "--block"]
    assert {"--head", "--port=6380", "--node-ip-address=10.0.0.1"} <= set(ray)
    assert json.loads(ray[ray.index("--resources") + 1]) == {"NPU": 8}


def test_serve_unit_deploys_the_config_after_the_head_is_up(tmp_path: Path) -> None:
    serve = generate(tmp_path, "--role", "head")[SERVE_UNIT]
    assert one(serve, "Unit", "Requires") == HEAD_UNIT
    assert one(serve, "Unit", "After") == HEAD_UNIT
    assert one(serve, "Service", "Type") == "oneshot"
    assert one(serve, "Service", "RemainAfterExit") == "yes"
    assert one(serve, "Service", "SyslogIdentifier") == "ascend-router-serve"
    deploy = systemd_argv(one(serve, "Service", "ExecStart"))
    assert deploy[:3] == [str(BIN / "serve"), "deploy", str(PROD)]

    wait = bash_script(one(serve, "Service", "ExecStartPre"))
    assert f"{BIN / 'ray'} status --address=127.0.0.1:6379" in wait
    assert "$(seq 120)" in wait and "/api/version" in wait
    bash = shutil.which("bash")
    if bash:  # the script is valid bash
        subprocess.run([bash, "-n", "-c", wait], check=True)


def test_worker_joins_the_head_with_its_own_cards(tmp_path: Path) -> None:
    argv = ["--role", "worker", "--head-address", "10.0.0.1", "--visible-devices", "4,5,6,7"]
    units = generate(tmp_path, *argv, "--user", "ray", "--set-env", "/opt/cann/set_env.sh")
    assert list(units) == [WORKER_UNIT]
    worker = units[WORKER_UNIT]
    assert one(worker, "Service", "SyslogIdentifier") == "ascend-router-ray-worker"
    assert one(worker, "Service", "User") == "ray"
    assert one(worker, "Service", "SupplementaryGroups") == "HwHiAiUser"
    assert values(worker, "Service", "Environment") == ["ASCEND_RT_VISIBLE_DEVICES=4,5,6,7"]
    script = shlex.split(bash_script(one(worker, "Service", "ExecStart")))
    assert script[:2] == ["source", "/opt/cann/set_env.sh"]
    assert "--address=10.0.0.1:6379" in script and "--head" not in script
    assert json.loads(script[script.index("--resources") + 1]) == {"NPU": 4}


def test_a_node_without_cards_sources_nothing_when_told(tmp_path: Path) -> None:
    units = generate(tmp_path, "--role", "head", "--npus", "0", "--set-env", "")
    head = units[HEAD_UNIT]
    assert values(head, "Service", "Environment") == []
    script = shlex.split(bash_script(one(head, "Service", "ExecStart")))
    assert script[0] == "exec" and json.loads(script[-1]) == {"NPU": 0}


def test_quoting_survives_paths_with_spaces_percent_and_dollar(tmp_path: Path) -> None:
    odd = tmp_path / "my $HOME 100%" / "prod.yaml"
    argv = [str(BIN / "serve"), "deploy", str(odd), '{"a": "b\\c"}']
    assert systemd_argv(exec_line(argv)) == argv


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--role", "worker"], "--head-address HOST:PORT"),
        (["--role", "worker", "--head-address", "10.0.0.1:x"], "not HOST:PORT"),
        (["--role", "head", "--head-address", "head.example:6379"], "this node's IP"),
        (["--role", "head", "--npus", "2", "--visible-devices", "0,1,2"], "make them agree"),
        (["--role", "head", "--visible-devices", "0,a"], "not a list"),
    ],
)
def test_bad_arguments_exit_2_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    full = ["systemd", *argv, "--config", str(PROD), "-o", str(tmp_path)]
    assert run_command(systemd_cmd, full) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_invalid_config_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [{model_id: a}]\n")
    out = tmp_path / "out"
    argv = ["systemd", "--role", "head", "--config", str(bad), "-o", str(out)]
    assert run_command(systemd_cmd, argv) == 2
    assert "invalid config" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--role", "head", "--npus", "99999999999"], "--npus 99999999999: need 0..4096"),
        (["--role", "head", "--head-address", "0.0.0.0:6379"], "cannot reach the head"),
        (["--role", "head", "--head-address", "127.0.0.1:6379"], "cannot reach the head"),
        (["--role", "worker", "--head-address", "0.0.0.0:6379"], "cannot reach the head"),
        (["--role", "worker", "--head-address", "http://10.0.0.1:6379"], "no URL scheme"),
        (["--role", "worker", "--head-address", "head node:6379"], "is not HOST:PORT"),
        (["--role", "worker", "--head-address", "'head':6379"], "is not HOST:PORT"),
        (["--role", "worker", "--head-address", "[fe80::1]:6379"], "IPv6 is not supported"),
    ],
)
def test_unusable_addresses_and_counts_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    full = ["systemd", *argv, "--config", str(PROD), "-o", str(tmp_path)]
    assert run_command(systemd_cmd, full) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_head_refuses_a_loopback_serve_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = PROD.parent / "local.yaml"
    argv = ["systemd", "--role", "head", "--config", str(local), "-o", str(tmp_path / "out")]
    assert run_command(systemd_cmd, argv) == 2
    assert "http_options.host is '127.0.0.1'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unwritable_output_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    argv = ["systemd", "--role", "head", "--config", str(PROD), "-o", str(afile)]
    assert run_command(systemd_cmd, argv) == 2
    assert "not a directory" in capsys.readouterr().err


def test_head_address_parsing() -> None:
    assert parse_head_address("10.0.0.1") == ("10.0.0.1", 6379)
    assert parse_head_address("head:7000") == ("head", 7000)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_head_address(":6379")
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_head_address("10.0.0.1:70000")
    with pytest.raises(ValueError, match="npus"):
        NodeUnits("worker", PROD, BIN, BIN, head_host="h", npus=-1, visible_devices=())


def _analyze_works(tmp_path: Path) -> bool:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return False
    probe = tmp_path / "probe.service"
    probe.write_text("[Service]\nType=oneshot\nExecStart=/bin/true\n")
    try:
        done = subprocess.run([tool, "verify", str(probe)], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    if not _analyze_works(tmp_path):
        pytest.skip("systemd-analyze verify does not work on this machine")
    for role in (["--role", "head"], ["--role", "worker", "--head-address", "10.0.0.1"]):
        out = tmp_path / role[1]
        argv = ["systemd", *role, "--config", str(PROD), "-o", str(out), "--bin-dir", str(BIN)]
        assert run_command(systemd_cmd, argv) == 0
        files = [str(p) for p in sorted(out.iterdir())]
        done = subprocess.run(
            ["systemd-analyze", "verify", *files], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
