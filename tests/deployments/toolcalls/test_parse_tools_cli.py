"""`ascend-router parse-tools` end to end, as a subprocess (`python -m cli.main`), and in this
process (`cli.main.main`) for the many outputs of `AS_WRITTEN`."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toolcall_cases import (
    PARSER_BY_CASE_FAMILY,
    REPO_ROOT,
    SAMPLES,
    case_tools,
    load_cases,
    random_chunks,
)
from toolcall_samples import AS_WRITTEN, Sample, with_tools

from cli.main import main
from deployments.toolcalls.registry import PARSERS

# One sample with calls per parser.
ONE_PER_PARSER = {s.parser: s for s in reversed(SAMPLES) if s.calls}


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "parse-tools", *args],
        input=stdin.encode("utf-8"),
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def run_cli_here(
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
    *args: str,
    stdin: str,
) -> subprocess.CompletedProcess[bytes]:
    """`run_cli` without a new interpreter (whose start-up imports take seconds)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8"))))
    code = main(["parse-tools", *args])
    out, err = capsysbinary.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def _tools_file(tmp_path: Path, tools: Any) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    return str(path)


def _sample_args(sample: Sample, tmp_path: Path) -> list[str]:
    """The command line that parses `sample` as the server would."""
    args = ["--parser", sample.parser, "--tools", _tools_file(tmp_path, with_tools(sample))]
    args += ["--prompt-suffix", sample.prompt_suffix]
    args += ["--engine-finish-reason", sample.engine_finish_reason]
    if sample.tool_choice is not None:
        args += ["--tool-choice", json.dumps(sample.tool_choice), "--constrained"]
    return args


def _expect(sample: Sample, proc: subprocess.CompletedProcess[bytes]) -> None:
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout.decode("utf-8"))
    assert set(out) == {"content", "reasoning_content", "tool_calls", "finish_reason"}
    assert out["tool_calls"] == [{"name": n, "arguments": a} for n, a in sample.calls]
    assert out["content"] == sample.content and out["reasoning_content"] == sample.reasoning
    assert out["finish_reason"] == sample.finish_reason


def test_list_prints_every_parser() -> None:
    proc = run_cli("--list")
    assert proc.returncode == 0
    assert proc.stdout.decode().split() == list(PARSERS)


@pytest.mark.parametrize("parser", list(PARSERS))
def test_parse_with_every_parser(parser: str, tmp_path: Path) -> None:
    sample = ONE_PER_PARSER[parser]
    _expect(sample, run_cli(*_sample_args(sample, tmp_path), stdin=sample.raw))


@pytest.mark.parametrize("parser", list(PARSERS))
def test_stream_chunks_with_every_parser(parser: str, tmp_path: Path) -> None:
    sample = ONE_PER_PARSER[parser]
    chunks = random_chunks(sample.raw, random.Random(parser), max_len=4)
    args = [*_sample_args(sample, tmp_path), "--stream-chunks"]
    _expect(sample, run_cli(*args, stdin=json.dumps(chunks)))


@pytest.mark.parametrize("chunking", ["whole", "stream-random", "stream-one-char"])
@pytest.mark.parametrize("sample", AS_WRITTEN, ids=[s.id for s in AS_WRITTEN])
def test_outputs_as_models_write_them(
    sample: Sample,
    chunking: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """Issue #14, section 4: bare calls, llama3 arrays, calls cut by max_tokens."""
    args = _sample_args(sample, tmp_path)
    if chunking == "whole":
        _expect(sample, run_cli_here(monkeypatch, capsysbinary, *args, stdin=sample.raw))
        return
    rng = random.Random(sample.id)
    chunks = list(sample.raw) if chunking == "stream-one-char" else random_chunks(sample.raw, rng)
    args += ["--stream-chunks"]
    _expect(sample, run_cli_here(monkeypatch, capsysbinary, *args, stdin=json.dumps(chunks)))


DSML_CASES = [c for c in load_cases() if c["family"] in ("deepseek-v4", "deepseek-v32")]


@pytest.mark.parametrize("chunking", ["whole", "stream-recorded", "stream-one-char"])
@pytest.mark.parametrize("case", DSML_CASES, ids=[c["id"] for c in DSML_CASES])
def test_family_reads_every_dsml_case(
    case: dict[str, Any],
    chunking: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """`--family deepseek_v4` / `deepseek_v32` picks the DSML parser; streamed and not."""
    family = PARSER_BY_CASE_FAMILY[case["family"]]  # the model family bears the parser's name
    raw, expected = case["input"]["raw"], case["expected"]
    args = ["--family", family, "--tools", _tools_file(tmp_path, case_tools(case) or [])]
    args += ["--prompt-suffix", case["input"].get("prompt_suffix", "")]
    args += ["--engine-finish-reason", case["input"].get("engine_finish_reason", "stop")]
    stdin = raw
    if chunking != "whole":
        chunks = case["input"].get("chunks", [raw]) if chunking == "stream-recorded" else list(raw)
        args, stdin = [*args, "--stream-chunks"], json.dumps(chunks)
    proc = run_cli_here(monkeypatch, capsysbinary, *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout.decode("utf-8"))
    assert out["tool_calls"] == [
        {"name": c["name"], "arguments": c["arguments"]} for c in expected["tool_calls"]
    ]
    contents = expected.get("content_any_of", [expected.get("content")])
    assert (out["content"] or "").strip() in [(c or "").strip() for c in contents]
    if "reasoning_content" in expected:
        assert out["reasoning_content"] == expected["reasoning_content"]
    assert out["finish_reason"] == expected["finish_reason"]


def test_tool_choice_none_returns_text(tmp_path: Path) -> None:
    sample = ONE_PER_PARSER["hermes"]
    proc = run_cli(
        "--parser",
        "hermes",
        "--tools",
        _tools_file(tmp_path, with_tools(sample)),
        "--tool-choice",
        '"none"',
        stdin=sample.raw,
    )
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["tool_calls"] == [] and out["finish_reason"] == "stop"
    assert "<tool_call>" in out["content"]


def test_named_tool_choice_with_constrained_output(tmp_path: Path) -> None:
    choice = json.dumps({"type": "function", "function": {"name": "get_weather"}})
    proc = run_cli(
        "--parser",
        "hermes",
        "--tools",
        _tools_file(tmp_path, with_tools(SAMPLES[0])),
        "--tool-choice",
        choice,
        "--constrained",
        stdin='{"city": "Lima"}',
    )
    out = json.loads(proc.stdout)
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Lima"}}]


def test_text_without_calls_exits_zero() -> None:
    proc = run_cli("--parser", "hermes", stdin="Just text.")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["content"] == "Just text."


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--parser", "nope"], "", "unknown parser 'nope'"),
        ([], "", "--parser or --family is required"),
        (["--parser", "hermes", "--tools", "/nonexistent/tools.json"], "", "cannot read tools"),
        (["--parser", "hermes", "--tools", "BAD_JSON"], "", "is not JSON"),
        (["--parser", "hermes", "--tool-choice", "{bad"], "", "--tool-choice is not JSON"),
        (["--parser", "hermes", "--tool-choice", "required"], "", "needs a non-empty 'tools'"),
        (["--parser", "hermes", "--stream-chunks"], "not json", "JSON array of strings"),
    ],
)
def test_bad_usage_exits_2_with_one_line(
    args: list[str], stdin: str, message: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    proc = run_cli(*[str(bad) if a == "BAD_JSON" else a for a in args], stdin=stdin)
    assert proc.returncode == 2
    err = proc.stderr.decode().strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--family", "gpt2"], "no default tool parser for model family 'gpt2'"),
        (["--family", "deepseek_v4", "--parser", "hermes"], "give --parser or --family, not both"),
    ],
)
def test_bad_family_exits_2_with_one_line(
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    proc = run_cli_here(monkeypatch, capsysbinary, *args, stdin="")
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and message in err and len(err.splitlines()) == 1
