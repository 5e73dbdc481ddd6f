"""What `amplint check` is given and what it answers (issue 17, items 7, 8, 10 and 11).

Each case runs the real CLI in a subprocess: the defects were hangs, tracebacks, exit
codes and words on the terminal, which only the whole program shows.  Every run has a
timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import sources

ROOT = Path(__file__).resolve().parent.parent
DEPRECATED = "import torch\n\nwith torch.cuda.amp.autocast(): pass\n"
BROKEN = "import torch\n\ndef f(:\n    pass\n"


def amplint(*args: str, cwd: Path = ROOT, stdin=None, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--no-cache", *args],
        cwd=cwd, env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout, **kwargs,
    )


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in (proc.stderr or "") + (proc.stdout or ""), proc.stderr


def reported_files(proc: subprocess.CompletedProcess) -> list[str]:
    return sorted(d["filename"] for d in json.loads(proc.stdout))


# --- item 7: files that are not files ------------------------------------------------------


def test_a_fifo_in_a_walked_directory_is_skipped_not_waited_for(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    os.mkfifo(tmp_path / "x.py")  # reading it would wait for a writer forever
    proc = amplint("--isolated", "--output-format", "json", ".", cwd=tmp_path, timeout=60)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert reported_files(proc) == ["a.py"] and proc.stderr == ""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_fifo_named_explicitly_is_an_error_not_a_hang(tmp_path: Path, jobs: str) -> None:
    os.mkfifo(tmp_path / "x.py")
    (tmp_path / "a.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--jobs", jobs, "x.py", "a.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    assert "x.py:1:1: error: not checked: it is a named pipe (FIFO), not a regular file" in proc.stderr
    assert "a.py:3:6: AMP401" in proc.stdout  # the other file was still checked


def test_dev_null_named_explicitly_does_not_pass_silently() -> None:
    proc = amplint("--isolated", "/dev/null")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "/dev/null:1:1: error: not checked: it is a character device, not a regular file" in proc.stderr
    assert "All checks passed!" not in proc.stdout


def test_reading_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.py")
    with pytest.raises(sources.UnreadableSource, match="named pipe"):
        sources.read(tmp_path / "x.py")


# --- item 8: named paths, empty runs, --exit-zero -------------------------------------------


@pytest.mark.parametrize("folder", ["build", "dist", "venv", ".venv", "site-packages"])
def test_a_named_directory_inside_a_default_excluded_folder_is_checked(tmp_path: Path, folder: str) -> None:
    proj = tmp_path / folder / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "dist").mkdir()
    for f in (proj / "a.py", proj / "sub" / "c.py", proj / "dist" / "b.py"):
        f.write_text(DEPRECATED)
    proc = amplint("--isolated", "--output-format", "json", f"{folder}/proj", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    # what lies below the named directory is still subject to the excludes (its dist/)
    assert reported_files(proc) == [f"{folder}/proj/a.py", f"{folder}/proj/sub/c.py"]
    walked_from_above = amplint("--isolated", "--output-format", "json", ".", cwd=tmp_path)
    assert walked_from_above.returncode == 0 and reported_files(walked_from_above) == []


def test_a_named_directory_that_git_ignores_is_checked(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("generated/\n*_pb2.py\n")
    proj = tmp_path / "generated" / "proj"
    proj.mkdir(parents=True)
    (proj / "a.py").write_text(DEPRECATED)
    (proj / "msg_pb2.py").write_text(DEPRECATED)  # git ignores it by its own pattern, not by the folder's
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    proc = amplint("--output-format", "json", "generated/proj", cwd=tmp_path)
    no_traceback(proc)
    assert reported_files(proc) == ["generated/proj/a.py", "generated/proj/msg_pb2.py"]


def test_force_exclude_applies_to_a_named_directory_too(tmp_path: Path) -> None:
    (tmp_path / "build" / "proj").mkdir(parents=True)
    (tmp_path / "build" / "proj" / "a.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--force-exclude", "build/proj", cwd=tmp_path)
    assert proc.returncode == 0
    assert "no Python files found" in proc.stderr


@pytest.mark.parametrize("layout", ["empty-directory", "only-excluded"])
def test_a_run_that_checks_nothing_says_so(tmp_path: Path, layout: str) -> None:
    (tmp_path / "src").mkdir()
    if layout == "only-excluded":
        (tmp_path / "src" / "build").mkdir()
        (tmp_path / "src" / "build" / "a.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "src", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0
    assert "All checks passed!" not in proc.stdout
    assert proc.stdout == "No files checked.\n"
    assert proc.stderr == "amplint: warning: no Python files found under the given paths (excluded, or none there)\n"


@pytest.mark.parametrize(
    "name, content",
    [("broken.py", BROKEN), ("binary.py", b"\x89PNG\r\n\x1a\n\x00\x00"), ("ok.py", DEPRECATED)],
    ids=["syntax-error", "undecodable", "findings"],
)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_exit_zero_exits_zero_whatever_the_files_hold(tmp_path: Path, name: str, content, jobs: str) -> None:
    target = tmp_path / name
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "other.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--exit-zero", "--jobs", jobs, name, "other.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "other.py:3:6: AMP401" in proc.stdout  # still reported
    with open(target, "rb") as fh:
        stdin = amplint("--isolated", "--exit-zero", "-", stdin=fh)
    assert stdin.returncode == 0, stdin.stderr


def test_exit_zero_still_fails_on_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    assert amplint("--isolated", "--exit-zero", "no_such.py", cwd=tmp_path).returncode == 2
    assert amplint("--isolated", "--exit-zero", "--select", "AMP999", "ok.py", cwd=tmp_path).returncode == 2


def test_sarif_recipe_with_a_syntax_error_still_writes_the_log(tmp_path: Path) -> None:
    """README's code-scanning job: `--output-format sarif --output-file amplint.sarif --exit-zero`."""
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "ok.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--output-format", "sarif", "--output-file", "amplint.sarif", "--exit-zero", ".",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads((tmp_path / "amplint.sarif").read_text())["runs"]
    assert [r["ruleId"] for r in run["results"]] == ["AMP401"]
    # the file it could not analyse is in the log too, not only on stderr
    assert run["invocations"][0]["executionSuccessful"] is False
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"


def test_a_file_named_twice_is_checked_once(tmp_path: Path) -> None:
    """Its findings and its warnings (here: a fix not written through a link) were printed twice."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "t.py").write_text(DEPRECATED)
    (tmp_path / "proj").mkdir()
    os.symlink("../outside/t.py", tmp_path / "proj" / "link.py")
    proc = amplint("--isolated", "--fix", "proj", "proj/link.py", "./proj/link.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.stdout.count("AMP401") == 1, proc.stdout
    assert proc.stderr.count("warning: fix not written") == 1, proc.stderr


# --- item 10: no tracebacks on closed streams and unwritable reports --------------------------


def test_closed_stdin_is_an_error_not_a_traceback() -> None:
    proc = amplint("--isolated", "-", stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
    no_traceback(proc)
    assert proc.returncode == 2
    assert proc.stderr == "amplint: error: cannot read stdin: it is closed\n"


def test_closed_stdout_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--isolated", "--no-cache", "ok.py"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    no_traceback(proc)
    assert proc.returncode == 2 and "stdout is closed" in proc.stderr


@pytest.mark.parametrize("exit_zero", [False, True])
@pytest.mark.parametrize("target", ["a-directory", "below-a-file"])
def test_an_output_file_that_cannot_be_written_is_a_clear_error(tmp_path: Path, target: str, exit_zero: bool) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "plain").write_text("")
    path = "a-directory" if target == "a-directory" else "plain/report.json"
    proc = amplint("--isolated", *(["--exit-zero"] if exit_zero else []), "--output-file", path, "ok.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2  # nobody will see these findings: never 0, not even under --exit-zero
    reason = "it is a directory" if target == "a-directory" else "cannot write it: Not a directory"
    assert proc.stderr == f"amplint: error: --output-file {path}: {reason}\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("extra", [(), ("--exit-zero",), ("--fix-only",)])
def test_an_output_file_whose_last_write_fails_is_a_clear_error(tmp_path: Path, extra: tuple) -> None:
    """A full disk shows at the last buffer's write, which a file gets at its close: the
    report was not written, so exit 2 with the reason, as for any file that cannot be written."""
    (tmp_path / "ok.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--no-cache", *extra, "--output-file", "/dev/full", "ok.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    assert proc.stderr == "amplint: error: cannot write --output-file /dev/full: No space left on device\n"


@pytest.mark.parametrize("checked", [("ok.py", "other.py"), (".",)], ids=["named", "in-a-checked-folder"])
def test_an_output_file_that_is_a_checked_file_is_refused_and_the_code_kept(tmp_path: Path, checked: tuple) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    (tmp_path / "other.py").write_text(DEPRECATED)
    proc = amplint("--isolated", "--no-cache", "--output-file", "other.py", *checked, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "it is one of the files checked" in proc.stderr, proc.stderr
    assert (tmp_path / "other.py").read_text() == DEPRECATED


# --- item 11: messages -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nx = 1\n",
         "the file starts with a UTF-8 byte-order mark but its coding cookie says latin-1"),
        ("x = 1\n".encode("utf-16"), "UTF-16 text (it starts with a UTF-16 byte-order mark)"),
        ("x = 1\n".encode("utf-16-le"), "looks like UTF-16-LE text without a byte-order mark"),
        ("x = 1\n".encode("utf-16-be"), "looks like UTF-16-BE text without a byte-order mark"),
        ("x = 1\n".encode("utf-32"), "UTF-32 text (it starts with a UTF-32 byte-order mark)"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file (contains NUL bytes)"),
    ],
    ids=["bom-and-latin1-cookie", "utf16-bom", "utf16le", "utf16be", "utf32-bom", "binary"],
)
def test_undecodable_bytes_say_what_they_are(tmp_path: Path, raw: bytes, reason: str) -> None:
    (tmp_path / "a.py").write_bytes(raw)
    from_file = amplint("--isolated", "a.py", cwd=tmp_path)
    no_traceback(from_file)
    assert from_file.returncode == 2
    line = f"a.py:1:1: error: {reason}"
    assert from_file.stderr.startswith(line), from_file.stderr
    # stdin: the same words in the same format, under the name the editor gave
    with open(tmp_path / "a.py", "rb") as fh:
        from_stdin = amplint("--isolated", "--stdin-filename", "a.py", "-", stdin=fh, cwd=tmp_path)
    assert from_stdin.returncode == 2
    assert from_stdin.stderr.splitlines()[0] == from_file.stderr.splitlines()[0]


def test_syntax_errors_from_stdin_and_from_files_read_alike(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BROKEN)
    from_file = amplint("--isolated", "a.py", cwd=tmp_path)
    from_stdin = amplint("--isolated", "--stdin-filename", "a.py", "-", input=BROKEN, cwd=tmp_path)
    assert from_file.returncode == from_stdin.returncode == 2
    assert from_stdin.stderr.splitlines()[0] == from_file.stderr.splitlines()[0] == (
        "a.py:3:7: error: SyntaxError: invalid syntax")


def test_a_dangling_symlink_is_called_a_broken_link(tmp_path: Path) -> None:
    os.symlink("gone.py", tmp_path / "link.py")
    (tmp_path / "a.py").write_text(DEPRECATED)
    for args in (["link.py", "a.py"], ["."]):
        proc = amplint("--isolated", *args, cwd=tmp_path)
        no_traceback(proc)
        assert proc.returncode == 2
        assert "link.py:1:1: error: cannot read: broken symbolic link (its target gone.py does not exist)" in proc.stderr
        assert "deleted during the run" not in proc.stderr
        assert "a.py:3:6: AMP401" in proc.stdout


def test_stdin_fix_reports_an_internal_error_once_not_once_per_pass(tmp_path: Path) -> None:
    """Fixing lints once per pass; the file path deduplicated the crashes, stdin printed each."""
    from test_bad_input import CRASHING_RULE_DRIVER  # a rule that raises on a.py

    driver = tmp_path / "driver.py"
    driver.write_text(CRASHING_RULE_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(driver), "check", "--isolated", "--fix", "--stdin-filename", "a.py", "-"],
                          input=DEPRECATED, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    no_traceback(proc)
    assert proc.stdout == 'import torch\n\nwith torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass\n'  # fixed
    assert proc.stderr.count("internal error in AMP999") == 1, proc.stderr


@pytest.mark.parametrize("isolated", [False, True], ids=["pyproject", "isolated"])
def test_fix_never_writes_through_a_linked_directory_to_outside(tmp_path: Path, isolated: bool) -> None:
    """With a [tool.amplint] (files walked, then grouped by configuration) each walked file was
    its own write root, so a file reached through `linked_dir -> ../outside` was fixed."""
    (tmp_path / "outside").mkdir()
    victim = tmp_path / "outside" / "shared.py"
    victim.write_text(DEPRECATED)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.amplint]\n")
    (project / "linked_dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (project / "own.py").write_text(DEPRECATED)
    proc = amplint(*(["--isolated"] if isolated else []), "--fix", "project", cwd=tmp_path)
    no_traceback(proc)
    assert victim.read_text() == DEPRECATED, "wrote outside the named paths"
    assert "outside the paths being checked" in proc.stderr
    assert 'torch.autocast("cuda"' in (project / "own.py").read_text()


# --- directories that cannot be read ----------------------------------------------------------

# Root reads every directory whatever its mode (and the tests run as root), so the run is
# given a folder that behaves as one without permission does for another user: listing it,
# and looking at or opening anything in it, fails with EACCES.
_WITHOUT_PERMISSION = """
import errno, os, runpy, sys
locked = os.path.abspath(sys.argv.pop(1))
asked = []
def _guard(real, inside_only):
    def call(p, *args, **kwargs):
        if not isinstance(p, int):
            where = os.path.abspath(os.fsdecode(p))
            if where.startswith(locked + os.sep) or (where == locked and not inside_only):
                asked.append(where)
                raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(p))
        return real(p, *args, **kwargs)
    return call
os.scandir = _guard(os.scandir, False)
os.stat = _guard(os.stat, True)
os.lstat = _guard(os.lstat, True)
os.open = _guard(os.open, True)
sys.argv[0] = "amplint"
try:
    runpy.run_module("amplint", run_name="__main__")
finally:
    print(f"asked: {len(asked)}", file=sys.stderr)
"""


def amplint_without_permission(locked: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_PERMISSION, locked, "check", "--no-cache", "--isolated", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert "asked: 0" not in proc.stderr, "the run never met the folder without permission"
    return proc


def _tree_with_a_locked_folder(tmp_path: Path) -> Path:
    (tmp_path / "sub" / "locked").mkdir(parents=True)
    (tmp_path / "sub" / "a.py").write_text(DEPRECATED)
    (tmp_path / "sub" / "locked" / "b.py").write_text(DEPRECATED)
    return tmp_path


@pytest.mark.parametrize("named", ["sub/locked", "sub", "."])
def test_a_directory_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path, named: str) -> None:
    """Named or met in a walk: exit 2 naming it, like an unreadable file; the rest is still checked."""
    project = _tree_with_a_locked_folder(tmp_path)
    proc = amplint_without_permission("sub/locked", "--output-format", "json", named, cwd=project)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "sub/locked:1:1: error: cannot read this directory: Permission denied" in proc.stderr
    rows = json.loads(proc.stdout)
    codes = [d["code"] for d in rows if d["filename"].endswith("a.py")]
    assert codes == ([] if named == "sub/locked" else ["AMP401"])
    assert [(d["filename"], d["code"]) for d in rows if d["code"] == "AMP000"] == [("sub/locked", "AMP000")]
    # --exit-zero exits 0 for it as for an unreadable file, and still names it
    proc = amplint_without_permission("sub/locked", "--exit-zero", named, cwd=project)
    assert proc.returncode == 0 and "cannot read this directory" in proc.stderr and "All checks passed" not in proc.stdout


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_file_inside_a_directory_that_cannot_be_searched_is_an_error_naming_it(tmp_path: Path, jobs: str) -> None:
    project = _tree_with_a_locked_folder(tmp_path)
    proc = amplint_without_permission("sub/locked", "--jobs", jobs, "sub/locked/b.py", "sub/a.py", cwd=project)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "sub/locked/b.py:1:1: error: cannot read: Permission denied" in proc.stderr
    assert "sub/a.py:3:6: AMP401" in proc.stdout


def test_add_noqa_names_a_directory_that_cannot_be_read(tmp_path: Path) -> None:
    project = _tree_with_a_locked_folder(tmp_path)
    proc = amplint_without_permission("sub/locked", "--add-noqa", "sub", cwd=project)
    no_traceback(proc)
    assert proc.returncode == 2 and "sub/locked: cannot read this directory: Permission denied" in proc.stderr
    assert "# noqa: AMP401" in (project / "sub" / "a.py").read_text()


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path: Path) -> None:
    """os.walk recursed once per level: a tree deeper than the recursion limit (1,200 folders,
    hostile pass 14) raised RecursionError and the run ended with a traceback and no report.
    The same with a small limit and a shallower tree, so that the test stays fast."""
    import sys as _sys

    from amplint.config import Config
    from amplint.project import census
    from amplint.runner import discover

    here = tmp_path
    for _ in range(300):
        here = here / "d"
        here.mkdir()
    (here / "t.py").write_text(DEPRECATED)
    limit = _sys.getrecursionlimit()
    _sys.setrecursionlimit(150)
    try:
        found, missing = discover([tmp_path], Config(root=tmp_path))
        listing = census.list_project.__wrapped__(str(tmp_path))
    finally:
        _sys.setrecursionlimit(limit)
    assert found == [here / "t.py"] and missing == []
    assert listing.files == (str(here / "t.py"),)
