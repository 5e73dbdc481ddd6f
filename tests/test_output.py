"""Output formats, each checked against what its consumer expects (ruff's JSON keys, GitHub's
annotation syntax, the official SARIF 2.1.0 schema), through the real `amplint` CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import output
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = ROOT.parent / "shared" / "data" / "sarif-schema-2.1.0.json"
BAD = "fixtures/AMP101/bad_clip_between_backward_and_step.py"

# A deprecated API (AMP401; a GradScaler's fix is unsafe: the class it builds is another) and
# clipping before unscale_ (AMP101, unsafe fix).
# AMP101 is in the preview tier, so the checks of TRAIN and BAD run with --preview.
TRAIN = '''\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(2, 4)).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
'''


def amplint(*args: str, cwd: Path = ROOT, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amplint", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def train(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def _codes_at(proc) -> list[tuple[str, int, int]]:
    return [(d["code"], d["location"]["row"], d["location"]["column"]) for d in json.loads(proc.stdout)]


def test_text_is_ruff_like_with_source_caret_and_summary(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "train.py", cwd=train.parent)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert "train.py:5:10: AMP401 `torch.cuda.amp.GradScaler` is deprecated since PyTorch 2.4" in lines
    i = lines.index("train.py:10:5: AMP101 `torch.nn.utils.clip_grad_norm_` runs on gradients still multiplied by the loss scale")
    assert lines[i + 1] == "    10 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    # the caret starts under the call (column 5) and spans it
    assert lines[i + 2] == "       |     " + "^" * len("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    assert "\x1b[" not in proc.stdout, "no colour when stdout is not a terminal"
    assert lines[-2:] == [
        "Found 2 errors.",
        "No fixes available (2 hidden fixes can be enabled with the `--unsafe-fixes` option).",
    ]


def test_colour_only_on_a_tty(train: Path) -> None:
    """Run the CLI with a pseudo-terminal as stdout: colour there, none in a pipe."""
    pty = pytest.importorskip("pty")
    import os

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--isolated", "--preview", "train.py"],
        cwd=train.parent, stdout=slave, stderr=subprocess.PIPE, env=env, timeout=120,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.returncode == 1
    tty_text = b"".join(chunks).decode()
    assert "\x1b[1;31mAMP101\x1b[0m" in tty_text
    piped = subprocess.run([sys.executable, "-m", "amplint", "check", "--isolated", "--preview", "train.py"], cwd=train.parent,
                           capture_output=True, text=True, env=env, timeout=120)
    assert "\x1b[" not in piped.stdout


def test_caret_keeps_tabs_and_show_fixes(tmp_path: Path) -> None:
    d = Diagnostic("AMP401", "m", "t.py", Span(1, 2, 1, 5), Fix("Use `x`", (Edit((1, 2), (1, 5), "x"),)))
    text = output.format_text([d], {"t.py": "\t\tabc\n"}, show_fixes=True)
    assert text.splitlines()[2] == "       | \t\t^^^"
    assert "= help: Use `x`" in text


def test_json_and_json_lines_agree(train: Path) -> None:
    as_json = amplint("check", "--isolated", "--preview", "--output-format", "json", str(train))
    as_lines = amplint("check", "--isolated", "--preview", "--output-format", "json-lines", str(train))
    assert as_json.returncode == as_lines.returncode == 1
    objs = json.loads(as_json.stdout)
    assert [json.loads(line) for line in as_lines.stdout.splitlines()] == objs
    assert _codes_at(as_json) == [("AMP401", 5, 10), ("AMP101", 10, 5)]
    first = objs[0]
    assert set(first) >= {"code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row"}
    assert first["fix"]["applicability"] == "unsafe" and first["fix"]["edits"]
    assert objs[1]["fix"]["applicability"] == "unsafe"


def test_github_annotations(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--output-format", "github", "train.py", cwd=train.parent)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == (
        "::error title=amplint (AMP401),file=train.py,line=5,col=10,endLine=5,endColumn=35::"
        "5:10: AMP401 `torch.cuda.amp.GradScaler` is deprecated since PyTorch 2.4"
    )
    # GitHub's escaping: property values may not hold `,` or `:`; data may not hold newlines
    d = Diagnostic("AMP101", "two\nlines 100%", "a,b:c.py", Span(1, 0, 1, 1))
    line = output.format_github([d])
    assert "file=a%2Cb%3Ac.py," in line and line.endswith("two%0Alines 100%25") and "\n" not in line


def test_sarif_validates_against_the_official_schema(train: Path) -> None:
    if not SARIF_SCHEMA.is_file():
        pytest.skip(f"SARIF schema not found at {SARIF_SCHEMA} (it lives in the shared data folder next to the repo)")
    jsonschema = pytest.importorskip("jsonschema")
    proc = amplint("check", "--isolated", "--preview", "--output-format", "sarif", "train.py", cwd=train.parent)
    assert proc.returncode == 1
    log = json.loads(proc.stdout)
    schema = json.loads(SARIF_SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, "\n".join(str(e) for e in errors[:3])
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(r.code for r in ALL_RULES)
    for r in rules:
        assert "helpUri" not in r  # no public home yet: no dead link; the page is the rule's `help`
        assert r["shortDescription"]["text"] and r["help"]["markdown"].startswith(f"# {r['id']} ")
    results = run["results"]
    assert [(x["ruleId"], rules[x["ruleIndex"]]["id"]) for x in results] == [("AMP401", "AMP401"), ("AMP101", "AMP101")]
    loc = results[0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert loc["region"] == {"startLine": 5, "startColumn": 10, "endLine": 5, "endColumn": 35}
    assert results[0]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"]


def test_sarif_with_no_findings_still_validates(tmp_path: Path) -> None:
    if not SARIF_SCHEMA.is_file():
        pytest.skip(f"SARIF schema not found at {SARIF_SCHEMA}")
    jsonschema = pytest.importorskip("jsonschema")
    (tmp_path / "ok.py").write_text("x = 1\n")
    proc = amplint("check", "--isolated", "--output-format", "sarif", "ok.py", cwd=tmp_path)
    assert proc.returncode == 0
    log = json.loads(proc.stdout)
    jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text()))
    assert log["runs"][0]["results"] == []


def test_statistics(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--statistics", str(train))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["1\tAMP101\t    clip-before-unscale", "1\tAMP401\t    deprecated-cuda-amp"]
    as_json = json.loads(
        amplint("check", "--isolated", "--preview", "--statistics", "--output-format", "json", str(train)).stdout)
    assert {r["code"]: r["count"] for r in as_json} == {"AMP101": 1, "AMP401": 1}


def test_exit_zero_and_output_file(train: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "amplint.sarif"
    proc = amplint("check", "--isolated", "--preview", "--exit-zero", "--output-format", "sarif", "--output-file", str(out),
                   str(train))
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert len(json.loads(out.read_text())["runs"][0]["results"]) == 2


def test_show_fixes_names_the_fix(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--show-fixes", str(train))
    assert "= help: Use `torch.amp.GradScaler(\"cuda\")`" in proc.stdout
    assert re.search(r"= help: Call `scaler.unscale_\(optimizer\)` before clipping \(unsafe", proc.stdout)


def test_positions_match_between_formats() -> None:
    """json, github and sarif carry the same 1-based position for the same finding."""
    j = amplint("check", "--isolated", "--preview", "--output-format", "json", BAD)
    g = amplint("check", "--isolated", "--preview", "--output-format", "github", BAD)
    s = amplint("check", "--isolated", "--preview", "--output-format", "sarif", BAD)
    (d,) = json.loads(j.stdout)
    (res,) = json.loads(s.stdout)["runs"][0]["results"]
    region = res["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (d["location"]["row"], d["location"]["column"])
    assert f"line={d['location']['row']},col={d['location']['column']}," in g.stdout


def test_safe_fix_marker_follows_unsafe_flag() -> None:
    unsafe = Diagnostic("AMP101", "m", "x.py", Span(1, 0, 1, 1), Fix("t", (), Applicability.UNSAFE))
    assert not output.shows_fix_marker(unsafe) and output.shows_fix_marker(unsafe, unsafe_fixes=True)


# Every character str.splitlines() ends a line at.
LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=repr)
def test_a_multi_line_message_keeps_one_finding_per_line(brk: str) -> None:
    """A message, note, fix title or path holding a line break: text and github output
    still give each finding one line (its header), which is what readers split on."""
    diagnostics = [
        Diagnostic("AMP201", f"`scaler.scale({brk}    loss{brk}).backward()` runs inside an autocast region", "a.py",
                   Span(6, 8, 8, 20), Fix(f"Move it{brk}out", (), Applicability.UNSAFE), notes=(f"via{brk}helper",)),
        Diagnostic("AMP401", f"name{brk}with a break", f"odd{brk}name.py", Span(1, 0, 1, 1)),
    ]
    text = output.format_text(diagnostics, show_fixes=True)
    assert len(text.splitlines()) == 4  # AMP201: header, help, note; AMP401: header
    header = text.splitlines()[0]
    assert header == "a.py:6:9: AMP201 `scaler.scale(loss).backward()` runs inside an autocast region"
    assert text.splitlines()[3].startswith(f"odd{repr(brk)[1:-1]}name.py:1:1: AMP401 name with a break")
    github = output.format_github(diagnostics)
    assert len(github.splitlines()) == 2 and all(line.startswith("::error ") for line in github.splitlines())


def test_a_multi_line_expression_in_a_message_is_quoted_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "import torch\n\ndef train(model, x, scaler):\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = model(x).sum()\n"
        "        scaler.scale(\n            loss  # 100%,done:: '#'\n        ).backward()\n"
        "        z = torch.log(\n            x\n        )\n"
    )
    proc = amplint("check", "--isolated", "--no-cache", "--preview", "--extend-select", "AMP502", "a.py", cwd=tmp_path)
    assert proc.returncode == 1
    headers = [line for line in proc.stdout.splitlines() if line.startswith("a.py:")]
    assert headers == [
        "a.py:6:9: AMP201 `scaler.scale(loss).backward()` runs inside an autocast region",
        "a.py:9:13: AMP502 `torch.log(x)` has no clamp or eps and can produce inf/NaN in float16",
    ]
    assert not [line for line in proc.stdout.splitlines() if line.strip() in ("loss", "x", ")` runs inside an autocast region")]
    github = amplint("check", "--isolated", "--no-cache", "--preview", "--extend-select", "AMP502", "--output-format", "github",
                     "a.py", cwd=tmp_path)
    assert len(github.stdout.splitlines()) == 2
    assert "%0A" not in github.stdout and "100%25" not in github.stdout  # the comment is not quoted
    # Every format quotes the one-line form, the comment left out (it would swallow the rest)
    rows = json.loads(amplint("check", "--isolated", "--no-cache", "--preview", "--output-format", "json", "a.py", cwd=tmp_path).stdout)
    assert rows[0]["message"] == "`scaler.scale(loss).backward()` runs inside an autocast region"


@pytest.mark.parametrize("code, quoted", [
    ("f(\n    x,  # a comment\n    y)", "f(x, y)"),
    ("f(\n    '#not a comment',\n)", "f('#not a comment',)"),
    ("f(x)", "f(x)"),
])
def test_code_quoted_in_a_message_loses_comments_and_line_breaks(code: str, quoted: str) -> None:
    from amplint.message_text import code_in_message

    assert code_in_message(code) == quoted


BROKEN = "import torch\n\ndef f(:\n    pass\n"


@pytest.mark.parametrize("exit_zero", [True, False])
def test_a_file_that_cannot_be_analysed_is_in_every_machine_readable_format(tmp_path: Path, exit_zero: bool) -> None:
    """Not only on stderr: a code-scanning job (--exit-zero, SARIF) must see which files were not checked."""
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "binary.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "train.py").write_text(TRAIN)
    flags = ["check", "--isolated", "--preview", "--no-cache", *(["--exit-zero"] if exit_zero else []), "--output-format"]
    expected_rc = 0 if exit_zero else 2

    proc = amplint(*flags, "json", ".", cwd=tmp_path)
    assert proc.returncode == expected_rc
    rows = json.loads(proc.stdout)
    not_analysed = {(r["filename"], r["location"]["row"], r["location"]["column"]) for r in rows if r["code"] == "AMP000"}
    assert not_analysed == {("binary.py", 1, 1), ("broken.py", 3, 7)}
    assert {r["code"] for r in rows} == {"AMP000", "AMP101", "AMP401"}
    assert all(r["message"].startswith("amplint did not analyse this file: ") for r in rows if r["code"] == "AMP000")
    lines = amplint(*flags, "json-lines", ".", cwd=tmp_path).stdout.splitlines()
    assert [json.loads(x) for x in lines] == rows

    github = amplint(*flags, "github", ".", cwd=tmp_path).stdout.splitlines()
    assert "::error title=amplint (AMP000),file=broken.py,line=3,col=7::amplint did not analyse this file: " \
           "SyntaxError: invalid syntax" in github
    assert any(line.startswith("::error title=amplint (AMP000),file=binary.py,") for line in github)

    log = json.loads(amplint(*flags, "sarif", ".", cwd=tmp_path).stdout)
    if SARIF_SCHEMA.is_file():
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text()))
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    notes = invocation["toolExecutionNotifications"]
    assert {(n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], n["level"]) for n in notes} == {
        ("binary.py", "error"), ("broken.py", "error")}
    assert sorted(r["ruleId"] for r in log["runs"][0]["results"]) == ["AMP101", "AMP401"]  # findings stay results

    # stdin too, in each machine-readable format
    for fmt in ("json", "json-lines", "github", "sarif"):
        proc = amplint(*flags, fmt, "--stdin-filename", "broken.py", "-", cwd=tmp_path, stdin=BROKEN)
        assert proc.returncode == expected_rc and "AMP000" in proc.stdout, (fmt, proc.stdout, proc.stderr)


def test_a_clean_sarif_run_says_it_succeeded(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    log = json.loads(
        amplint("check", "--isolated", "--preview", "--no-cache", "--output-format", "sarif", ".", cwd=tmp_path).stdout)
    assert log["runs"][0]["invocations"] == [{"executionSuccessful": True}]


@pytest.mark.parametrize("fmt", ["text", "github", "sarif", "json"])
def test_a_file_name_that_is_not_utf_8_is_reported_in_every_format(tmp_path: Path, fmt: str) -> None:
    """A name with bytes that are not UTF-8 (`\\xff\\xfe.py`, from an old archive) crashed SARIF
    and the text and github reports written to a file (hostile pass 11)."""
    try:
        (tmp_path / os.fsdecode(b"\xff\xfe.py")).write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    report = tmp_path / f"report.{fmt}"
    proc = amplint("check", "--isolated", "--no-cache", "--output-format", fmt, "--output-file", str(report), ".",
                   cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    data = report.read_bytes()
    if fmt == "sarif":
        (result,) = json.loads(data)["runs"][0]["results"]
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "%FF%FE.py"
    elif fmt == "json":
        assert len(json.loads(data)) == 1
    else:
        assert b"\xff\xfe.py" in data


def test_a_report_that_cannot_be_rendered_leaves_the_old_one(tmp_path: Path, monkeypatch) -> None:
    """The report is rendered before --output-file is opened: a failure there must not truncate
    the report already written (hostile pass 11)."""
    from amplint import cli

    (tmp_path / "t.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    report = tmp_path / "report.sarif"
    report.write_text("previous report\n")

    def broken(*args, **kwargs):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(output, "render", broken)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="renderer bug"):
        cli.main(["check", "--isolated", "--no-cache", "--output-format", "sarif", "--output-file", str(report), "t.py"])
    assert report.read_text() == "previous report\n"
