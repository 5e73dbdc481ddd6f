"""Nothing of the command runs, or prints, after verify has exited: a child the script started in a
session of its own is outside the command's process group, and used to go on printing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from amplint.runtime.launch import _running  # noqa: E402

from .conftest import ROOT, SCRIPTS  # noqa: E402

pytestmark = pytest.mark.runtime


def test_a_detached_child_is_ended_before_verify_exits(tmp_path):
    pid_file, out = tmp_path / "child.pid", tmp_path / "out.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with open(out, "wb") as sink:
        verify = subprocess.Popen([sys.executable, "-m", "amplint", "verify", "--no-progress", "--timeout", "120",
                                   str(SCRIPTS / "detached_child.py"), str(pid_file)],
                                  stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        deadline = time.monotonic() + 90
        while not pid_file.exists() and time.monotonic() < deadline and verify.poll() is None:
            time.sleep(0.1)
        assert pid_file.exists(), out.read_text()
        child = int(pid_file.read_text())
        assert _running(child)
        verify.send_signal(signal.SIGINT)  # verify ends the command as on --timeout
        code = verify.wait(timeout=60)
    assert code == 130
    size = out.stat().st_size
    assert not _running(child), "the detached child outlived verify"
    time.sleep(1.0)
    assert out.stat().st_size == size, out.read_text()[size:]
