"""The CLI starts without its heavy dependencies: `ascend-router --help` and `parse-tools` import
neither torch, Ray, transformers nor xgrammar (each takes seconds to import), and the constants
the light command modules spell out equal those of the modules they stand for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli import quantize_cmd, tiny_models_cmd

HEAVY = ("torch", "ray", "transformers", "xgrammar")

_PROBE = """
import contextlib, io, json, sys
from cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)))
"""


def _heavy_modules_imported(argv: list[str], stdin: str = "") -> list[str]:
    """Run `ascend-router ARGV` in a fresh interpreter; the heavy modules it imported."""
    probe = _PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    imported: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return imported


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["parse-tools", "--help"],
        ["parse-tools", "--list"],
        ["parse-tools", "--parser", "hermes"],
        ["parse-tools", "--family", "deepseek_v4", "--tool-choice", "required", "--constrained"],
    ],
)
def test_help_and_parse_tools_import_no_heavy_module(argv: list[str]) -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert _heavy_modules_imported(argv, stdin=text) == []


def test_quantize_flags_equal_the_quantizer_s() -> None:
    from engine.quantization import quantizer

    assert set(quantize_cmd.MODES) == set(quantizer.MODES)
    assert (quantize_cmd.CALIB_SAMPLES, quantize_cmd.CALIB_LEN) == (
        quantizer.CALIB_SAMPLES,
        quantizer.CALIB_LEN,
    )


def test_tiny_model_families_equal_the_shipped_tokenizers() -> None:
    from fixtures.family_tokenizers import FAMILY_TOKENIZERS

    assert tiny_models_cmd.FAMILIES == tuple(sorted(FAMILY_TOKENIZERS))
