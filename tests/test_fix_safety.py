"""`--fix` cannot lose code (issue 8, item 2).

Atomic writes that keep line endings, BOM, coding cookie and mode; nothing written for a
file that does not parse, for a fix that does not converge or parse, through a symlink
leading outside the checked paths, or over content that changed since it was read; and
two `amplint check --fix` processes on one tree end with the single-process result.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import fixes, runner, sources
from amplint.config import Config
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.engine import parse

ROOT = Path(__file__).resolve().parent.parent
AMP401 = ROOT / "fixtures" / "AMP401"
DEPRECATED = "import torch\n\nwith torch.cuda.amp.autocast(): pass\n"
MODERN = 'import torch\n\nwith torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass\n'


def amplint(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--isolated", "--no-cache", "--jobs", "1", *args],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=300,
    )


def fix_dir(path: Path, **kw) -> runner.RunResult:
    return runner.check_paths([path], Config(root=path if path.is_dir() else path.parent), fix=True, jobs=1, **kw)


# --- what is kept ----------------------------------------------------------------------------


def test_crlf_bom_cookie_and_mode_are_kept(tmp_path: Path) -> None:
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(DEPRECATED.replace("\n", "\r\n").encode())
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + DEPRECATED.encode())
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# na\xefve caf\xe9\n" + DEPRECATED.encode())
    crlf.chmod(0o751)
    proc = amplint("--fix", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert crlf.read_bytes() == MODERN.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o751
    assert bom.read_bytes() == b"\xef\xbb\xbf" + MODERN.encode()
    assert latin.read_bytes() == b"# -*- coding: latin-1 -*-\n# na\xefve caf\xe9\n" + MODERN.encode()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".amplint-tmp")]


def test_edits_are_written_verbatim_at_offsets_counted_like_the_parser() -> None:
    """An edit carries its final text: the edit builder chose each added line's ending
    (tests/test_fix_positions.py); `apply_fixes` only places it, counting a lone "\\r"
    as a line break as libcst does."""
    source = "a = 1\r\nb = 2\rc = 3\n"
    fix = Fix("insert", (Edit((3, 0), (3, 0), "x = 0\r"),), Applicability.SAFE)
    out, accepted = fixes.apply_fixes(source, [fix])
    assert accepted == [fix]
    assert out == "a = 1\r\nb = 2\rx = 0\rc = 3\n"


def test_unsafe_insert_fix_in_a_crlf_file_has_no_mixed_endings(tmp_path: Path) -> None:
    src = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text()
    target = tmp_path / "train.py"
    target.write_bytes(src.replace("\n", "\r\n").encode())
    proc = amplint("--fix", "--unsafe-fixes", "--preview", "--select", "AMP101", str(target))  # AMP101 is preview
    assert proc.returncode == 0, proc.stdout + proc.stderr
    raw = target.read_bytes()
    assert b"unscale_" in raw
    assert raw.count(b"\n") == raw.count(b"\r\n"), "a bare LF slipped into a CRLF file"
    parse(raw.decode(), str(target))


def test_write_is_atomic_via_a_temporary_file_in_the_same_directory(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((Path(src).parent, Path(src).name, Path(dst)))
        assert Path(dst).read_text() == DEPRECATED  # the old content until the very last step
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    result = fix_dir(target)
    assert result.files[0].written and target.read_text() == MODERN
    ((tmp_dir, tmp_name, dst),) = seen
    assert tmp_dir == tmp_path and tmp_name.startswith(".a.py.") and dst == target


def test_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    result = fix_dir(target)
    assert target.read_text() == DEPRECATED
    assert not result.files[0].written
    assert result.files[0].warnings == ["fix not written: No space left on device"]  # reported, not silent
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]


def test_a_fix_that_is_not_written_leaves_its_findings_reported(tmp_path: Path, monkeypatch) -> None:
    """A full disk, or a file that kept changing: nothing was fixed, so the run must not say
    "All checks passed!" and exit 0 (the unfixed finding was reported as fixed)."""
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    (file,) = fix_dir(target).files
    assert [d.code for d in file.diagnostics] == ["AMP401"] and not file.fixed.applied
    monkeypatch.undo()
    monkeypatch.setattr(sources, "replace_if_unchanged", lambda *a, **k: False)  # changed under us, every try
    (file,) = fix_dir(target).files
    assert file.warnings[-1].startswith("fix not written: the file kept changing")
    assert [d.code for d in file.diagnostics] == ["AMP401"] and not file.fixed.applied
    assert target.read_text() == DEPRECATED


# --- what is never written ----------------------------------------------------------------------


def test_never_applied_to_a_file_that_does_not_parse(tmp_path: Path) -> None:
    broken = DEPRECATED + "def f(:\n"
    target = tmp_path / "a.py"
    target.write_text(broken)
    proc = amplint("--fix", str(target))
    assert proc.returncode == 2 and "SyntaxError" in proc.stderr
    assert target.read_text() == broken


def _edit_fix(source: str, content: str) -> list[Diagnostic]:
    fix = Fix("t", (Edit((1, 0), (1, 0), content),), Applicability.SAFE)
    return [Diagnostic("AMP401", "m", "x.py", Span(1, 0, 1, 1), fix)]


def test_a_fix_that_breaks_the_parse_is_dropped_and_reported() -> None:
    outcome = fixes.fix_text("x = 1\n", lambda text: _edit_fix(text, "def (:\n") if text == "x = 1\n" else [])
    assert outcome.source == "x = 1\n" and [d.code for d in outcome.rejected] == ["AMP401"]
    assert runner.fix_warnings(outcome) == ["fix for AMP401 at line 1 dropped: the fixed text would not parse"]


def test_fixes_that_never_converge_are_all_dropped() -> None:
    outcome = fixes.fix_text("x = 1\n", lambda text: _edit_fix(text, "# again\n"))
    assert not outcome.converged and outcome.source == "x = 1\n" and outcome.applied == []
    assert "did not converge" in runner.fix_warnings(outcome)[0]


def test_fixed_text_parses_and_a_second_run_finds_nothing_fixable(tmp_path: Path) -> None:
    tree = tmp_path / "amp401"
    shutil.copytree(AMP401, tree)
    first = amplint("--fix", str(tree))
    assert "Traceback" not in first.stderr
    for f in sorted(tree.glob("bad_*.py")):
        if not f.name.endswith(".fixed.py"):
            parse(f.read_text(), str(f))
    second = amplint("--fix", str(tree))
    assert "Fixed" not in second.stdout and "fixable" not in second.stdout, second.stdout


def test_never_writes_through_a_symlink_to_outside_the_given_paths(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "shared.py"
    victim.write_text(DEPRECATED)
    project = tmp_path / "project"
    project.mkdir()
    (project / "link.py").symlink_to(victim)
    (project / "linked_dir").symlink_to(outside, target_is_directory=True)
    (project / "own.py").write_text(DEPRECATED)
    inside = project / "real.py"
    inside.write_text(DEPRECATED)
    (project / "inner_link.py").symlink_to(inside)
    proc = amplint("--fix", str(project))
    assert victim.read_text() == DEPRECATED, "wrote outside the checked paths"
    assert (project / "link.py").is_symlink() and (project / "inner_link.py").is_symlink()
    assert (project / "own.py").read_text() == MODERN and inside.read_text() == MODERN
    assert "outside the paths being checked" in proc.stderr
    # Named explicitly, the link itself is the checked path, not its target.
    proc = amplint("--fix", str(project / "link.py"))
    assert victim.read_text() == DEPRECATED and "outside the paths being checked" in proc.stderr
    # Naming the outside directory too makes it fair game.
    amplint("--fix", str(project), str(outside))
    assert victim.read_text() == MODERN


def test_content_changed_since_reading_is_refixed_not_overwritten(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)
    edited = DEPRECATED + "# the user's new line\n"
    real_fix_text = runner.fix_text
    calls = []

    def edit_during_first_fix(*args, **kwargs):
        outcome = real_fix_text(*args, **kwargs)
        if not calls:
            target.write_text(edited)  # an editor saves while amplint is fixing
        calls.append(1)
        return outcome

    monkeypatch.setattr(runner, "fix_text", edit_during_first_fix)
    result = fix_dir(target)
    assert len(calls) == 2 and result.files[0].written
    assert target.read_text() == MODERN + "# the user's new line\n"


def test_replace_if_unchanged_refuses_stale_content(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_text("new\n")
    assert not sources.replace_if_unchanged(target, b"old\n", "fixed\n")
    assert target.read_text() == "new\n"
    assert sources.replace_if_unchanged(target, b"new\n", "fixed\n")
    assert target.read_text() == "fixed\n"


@pytest.mark.parametrize("run", range(2))
def test_two_concurrent_fix_processes_never_corrupt_a_file(tmp_path: Path, run: int) -> None:
    tree = tmp_path / "concurrent"
    single = tmp_path / "single"
    for dst in (tree, single):
        shutil.copytree(AMP401, dst)
        for i in range(4):  # more files, more chances to race
            for f in AMP401.glob("bad_*.py"):
                if not f.name.endswith(".fixed.py"):
                    shutil.copy(f, dst / f"{f.stem}_{i}.py")
    amplint("--fix", str(single))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "amplint", "check", "--isolated", "--no-cache", "--jobs", "1", "--fix", str(tree)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for out, err in outs:
        assert "Traceback" not in err, err
    for f in sorted(single.glob("*.py")):
        got = (tree / f.name).read_text()
        parse(got, f.name)
        assert got == f.read_text(), f"{f.name} differs from the single-process result"
    assert not [p for p in tree.iterdir() if p.name.endswith(".amplint-tmp")]


# --- a file with several names ------------------------------------------------------------------


def test_every_hard_link_of_a_fixed_file_sees_the_fix(tmp_path: Path) -> None:
    """A rename would fix one name and leave the other holding the old file."""
    target = tmp_path / "a.py"
    target.write_bytes(DEPRECATED.replace("\n", "\r\n").encode())
    target.chmod(0o640)
    other = tmp_path / "elsewhere.txt"
    os.link(target, other)
    inode = target.stat().st_ino
    proc = amplint("--fix", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert other.read_bytes() == target.read_bytes() == MODERN.replace("\n", "\r\n").encode()
    assert target.stat().st_ino == inode and target.stat().st_nlink == 2
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "elsewhere.txt"]


def test_a_hard_linked_file_changed_since_reading_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_text("new\n")
    os.link(target, tmp_path / "b.py")
    assert not sources.replace_if_unchanged(target, b"old\n", "fixed\n")
    assert (tmp_path / "b.py").read_text() == "new\n"
    assert sources.replace_if_unchanged(target, b"new\n", "a longer fixed text\n")
    assert (tmp_path / "b.py").read_text() == "a longer fixed text\n"
    assert sources.replace_if_unchanged(target, b"a longer fixed text\n", "short\n")
    assert (tmp_path / "b.py").read_bytes() == b"short\n"


@pytest.mark.parametrize("failing", ["write", "posix_fallocate", "fsync"])
def test_a_failed_in_place_write_leaves_the_old_bytes(tmp_path: Path, monkeypatch, failing: str) -> None:
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)
    os.link(target, tmp_path / "b.py")
    real = getattr(os, failing, None)
    if real is None:
        pytest.skip(f"no os.{failing} here")
    calls = []

    def fails_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            if failing == "write":  # part of the new text lands, then the disk is full
                real(args[0], bytes(args[1][:5]))
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(os, failing, fails_first)
    result = fix_dir(target)
    assert calls and not result.files[0].written
    assert result.files[0].warnings == ["fix not written: No space left on device"]
    assert (tmp_path / "b.py").read_text() == target.read_text() == DEPRECATED
