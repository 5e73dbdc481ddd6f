"""Files checked in a process pool give the same results, in the same order, as in-process."""

from __future__ import annotations

import shutil
from pathlib import Path

from amplint.cli import main
from amplint.config import Config
from amplint.runner import check_paths, discover

ROOT = Path(__file__).resolve().parent.parent


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "fixtures", src)
    (src / "zz_broken.py").write_text("import torch\nwith torch.autocast('cuda'):\n    loss.backward(\n")
    (src / "zz_latin1.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xe9'\n")  # cannot decode
    return src


def _summary(result) -> list:
    return [
        (f.path, f.diagnostics, f.error and (f.error.line, f.error.col0, f.error.reason), f.crashes)
        for f in result.files
    ]


def test_pool_equals_in_process_and_keeps_discovery_order(tmp_path) -> None:
    src = _tree(tmp_path)
    config = Config.all_rules().with_overrides(root=tmp_path)
    serial = check_paths([src], config, jobs=1)
    pooled = check_paths([src], config, jobs=3)
    assert [f.path for f in pooled.files] == [str(p) for p in discover([src], config)[0]]
    assert _summary(pooled) == _summary(serial)
    assert sum(len(f.diagnostics) for f in serial.files) > 10 and len(serial.errors) == 2


def test_pool_with_cache_cold_and_warm(tmp_path) -> None:
    src = _tree(tmp_path)
    config = Config(root=tmp_path)
    expected = _summary(check_paths([src], config, jobs=1))
    assert _summary(check_paths([src], config, jobs=2, cache_dir=tmp_path / "c")) == expected
    assert _summary(check_paths([src], config, jobs=2, cache_dir=tmp_path / "c")) == expected


def test_fix_in_pool_equals_fix_in_process(tmp_path) -> None:
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    ra = check_paths([a], Config(root=tmp_path / "a"), jobs=1, fix=True, unsafe=True)
    rb = check_paths([b], Config(root=tmp_path / "b"), jobs=2, fix=True, unsafe=True)
    assert [f.written for f in ra.files] == [f.written for f in rb.files] and any(f.written for f in ra.files)
    for fa in sorted(a.rglob("*.py")):
        assert fa.read_bytes() == (b / fa.relative_to(a)).read_bytes()


def test_cli_jobs_output_is_identical(tmp_path, monkeypatch, capsys) -> None:
    src = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    outputs = []
    for jobs in ("1", "2"):
        code = main(["check", "--isolated", "--no-cache", "--jobs", jobs, "--output-format", "json", str(src)])
        outputs.append((code, capsys.readouterr()))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 2  # the unparsable files make it an error run
