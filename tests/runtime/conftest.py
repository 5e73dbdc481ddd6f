"""Runtime tests: run real training scripts under `amplint verify` on the CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_verify(args: list[str], tmp: Path, capsys=None) -> tuple[int, dict]:
    """Call `amplint verify` in-process (the command still runs in a subprocess); return (exit, report)."""
    from amplint.runtime.cli import verify

    report = tmp / "report.json"
    code = verify(["--no-progress", "--report", str(report), *args])
    return code, json.loads(report.read_text())


@pytest.fixture
def verify_run(tmp_path):
    def run(*args: str) -> tuple[int, dict]:
        return run_verify(list(args), tmp_path)

    return run


PY = sys.executable
