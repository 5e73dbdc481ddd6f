"""The real-code scorer (benchmarks/real_code_eval.py) counts what LABELS.md says it counts.

A tiny synthetic label file and hand-made findings stand in for the corpus and for amplint, so
the matching and the figures are checked without either; one test runs the script end to end on
a two-file folder with a fake amplint command.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("real_code_eval", ROOT / "benchmarks" / "real_code_eval.py")
rce = importlib.util.module_from_spec(_spec)
sys.modules["real_code_eval"] = rce  # dataclasses look their module up by name
_spec.loader.exec_module(rce)

LABELS = textwrap.dedent(
    """\
    # a comment header, as the real label files have
    corpus = "src/pkg"

    [[case]]
    path = "pkg/train.py"
    line = 10
    code = "AMP101"
    expect = "report"
    why = "clip between scaled backward and scaler.step"

    [[case]]
    path = "pkg/train.py"
    line = 20
    alt_lines = [18]
    code = "AMP106"
    expect = "report"
    why = "save_checkpoint helper saves no scaler state"
    cross_module = true

    [[case]]
    path = "pkg/train.py"
    line = 30
    code = "AMP101"
    expect = "report"
    why = "a second clip, missed"

    [[case]]
    path = "pkg/eval.py"
    line = 5
    code = "AMP301"
    expect = "silent"
    why = "half model only evaluated"

    [[case]]
    path = "pkg/eval.py"
    line = 9
    code = "AMP203"
    expect = "silent"
    why = "accelerate-managed"
    """
)


# a report case that the silent AMP301 case's finding would also satisfy
CLASH = """
[[case]]
path = "pkg/eval.py"
line = 6
alt_lines = [5]
code = "AMP301"
expect = "report"
why = "contradicts the silent case at line 5"
"""


def labels(text: str = LABELS):
    return rce.parse_labels(text, Path("pkg.toml"))


def F(path: str, line: int, code: str) -> rce.Finding:
    return rce.Finding(path, line, code, "msg")


def verdicts(result) -> list[tuple[str, int, str]]:
    return [(c.code, c.line, v) for c, v, _ in result.verdicts]


def test_parse_reads_every_field() -> None:
    lf = labels()
    assert lf.name == "pkg" and lf.corpus == "src/pkg" and len(lf.cases) == 5
    ckpt = lf.cases[1]
    assert (ckpt.lines, ckpt.cross_module, ckpt.expect) == ((20, 18), True, "report")
    assert lf.cases[0].cross_module is False and lf.cases[0].alt_lines == ()


def test_scoring_counts_each_verdict() -> None:
    findings = [
        F("pkg/train.py", 10, "AMP101"),  # TP
        F("pkg/train.py", 18, "AMP106"),  # TP through its alternative line
        F("pkg/eval.py", 5, "AMP301"),  # FP: a silent case reported
        F("pkg/eval.py", 5, "AMP302"),  # right place, other code: unjudged
        F("pkg/train.py", 11, "AMP101"),  # one line off: unjudged, not a TP
        F("./pkg/other.py", 3, "AMP109"),  # a code the script never heard of
    ]
    result = rce.score(labels().cases, findings)
    assert verdicts(result) == [
        ("AMP101", 10, "TP"),
        ("AMP106", 20, "TP"),
        ("AMP101", 30, "FN"),
        ("AMP301", 5, "FP"),
        ("AMP203", 9, "OK"),
    ]
    assert sorted(f.where() for f in result.unjudged) == [
        "./pkg/other.py:3 AMP109 msg",
        "pkg/eval.py:5 AMP302 msg",
        "pkg/train.py:11 AMP101 msg",
    ]
    s = result.by_code()
    assert (s["AMP101"].tp, s["AMP101"].fn, s["AMP101"].unjudged) == (1, 1, 1)
    assert s["AMP101"].recall == 0.5 and s["AMP101"].precision == 1.0
    assert (s["AMP301"].fp, s["AMP301"].precision, s["AMP301"].recall) == (1, 0.0, None)
    assert s["AMP203"].ok == 1 and s["AMP203"].precision is None
    assert s["AMP109"].unjudged == 1  # new codes show up without any table to update
    assert result.cross_module_found() == (1, 1)  # the AMP106 case, found through its alt line


def test_one_finding_counts_for_one_case_only() -> None:
    text = LABELS + textwrap.dedent(
        """
        [[case]]
        path = "pkg/train.py"
        line = 18
        code = "AMP106"
        expect = "report"
        why = "a second save; case 2 also accepts line 18"
        """
    )
    cases = labels(text).cases
    one = rce.score(cases, [F("pkg/train.py", 18, "AMP106")])
    assert [v for c, v, _ in one.verdicts if c.code == "AMP106"].count("TP") == 1
    # the matching is maximal: findings at 20 and 18 satisfy both cases, whichever order they come in
    for order in ([20, 18], [18, 20]):
        both = rce.score(cases, [F("pkg/train.py", n, "AMP106") for n in order])
        assert [v for c, v, _ in both.verdicts if c.code == "AMP106"] == ["TP", "TP"]
        assert both.unjudged == [] and both.duplicates == []


def test_a_repeated_finding_is_a_duplicate_not_unjudged() -> None:
    result = rce.score(labels().cases, [F("pkg/train.py", 10, "AMP101")] * 2)
    assert len(result.duplicates) == 1 and result.unjudged == []


def test_paths_are_normalised() -> None:
    report = json.dumps([{"filename": "./pkg/train.py", "code": "AMP101", "location": {"row": 10}, "message": "m"}])
    (finding,) = rce.parse_findings(report)
    assert finding.path == "pkg/train.py"
    assert verdicts(rce.score(labels().cases, [finding]))[0] == ("AMP101", 10, "TP")


def test_single_file_differences() -> None:
    tree = [F("pkg/train.py", 10, "AMP101"), F("pkg/train.py", 20, "AMP106"), F("pkg/x.py", 1, "AMP101")]
    single = [F("pkg/train.py", 10, "AMP101"), F("pkg/train.py", 40, "AMP105")]
    assert rce.compare_single_file(tree, single, ["pkg/train.py"]) == [
        "only in the whole-tree run: pkg/train.py:20 AMP106 msg",
        "only in the single-file run: pkg/train.py:40 AMP105 msg",
    ]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda t: t.replace('expect = "silent"', 'expect = "maybe"', 1), "expect must be one of"),
        (lambda t: t.replace("alt_lines", "alt_line"), "unknown key(s) ['alt_line']"),
        (lambda t: t.replace('code = "AMP106"', 'code = "AMP1O6"'), "code must look like"),
        (lambda t: t.replace("line = 10", "line = 0"), "line must be a positive integer"),
        (lambda t: t.replace("line = 10", 'line = "10"'), "line must be a positive integer"),
        (lambda t: t.replace('path = "pkg/eval.py"', 'path = "../eval.py"', 1), "must be relative"),
        (lambda t: t.replace('corpus = "src/pkg"', ""), "missing `corpus"),
        (lambda t: t.replace('why = "accelerate-managed"', 'why = ""'), "why must say why"),
        (lambda t: t.replace('why = "accelerate-managed"', ""), "missing key(s) ['why']"),
        (lambda t: t.replace("cross_module = true", 'cross_module = "yes"'), "cross_module must be"),
        (lambda t: t + "\n[[case]\n", "not valid TOML"),
        (lambda t: "name = 'x'\n" + t, "unknown top-level key(s) ['name']"),
        # the same place judged twice, or judged both ways through an alternative line
        (lambda t: t.replace("line = 30", "line = 10"), "labelled twice"),
        (lambda t: t + CLASH, "both judge line 5"),
    ],
)
def test_malformed_label_files_are_rejected_with_the_reason(edit, reason) -> None:
    with pytest.raises(rce.LabelError) as err:
        labels(edit(LABELS))
    assert reason in str(err.value)


def test_end_to_end_with_a_fake_amplint(tmp_path: Path, capsys) -> None:
    """main() runs the command in the corpus folder, scores, prints, writes JSON and exits 0."""
    folder = tmp_path / "corpus" / "src" / "pkg" / "pkg"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text("\n" * 40)
    (folder / "eval.py").write_text("\n" * 10)
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "pkg.toml").write_text(LABELS)
    fake = tmp_path / "fake_amplint.py"
    # prints one finding per checked target, relative to its working directory like amplint does
    fake.write_text(
        "import json, os, sys\n"
        "assert sys.argv[1] == 'check' and '--isolated' in sys.argv and 'AMP401,AMP402' in sys.argv\n"
        "found = [{'filename': 'pkg/train.py', 'code': 'AMP101', 'location': {'row': 10}, 'message': 'm'}]\n"
        "if sys.argv[2] == '.':\n"
        "    assert os.path.isdir('pkg')\n"
        "    found.append({'filename': 'pkg/eval.py', 'code': 'AMP301', 'location': {'row': 5}, 'message': 'm'})\n"
        "print(json.dumps([f for f in found if sys.argv[2] in ('.', f['filename'])]))\n"
    )
    out = tmp_path / "out.json"
    argv = ["--corpus", str(tmp_path / "corpus"), "--labels", str(tmp_path / "labels"),
            "--amplint", f"{sys.executable} {fake}", "--single-file", "--json", str(out)]
    assert rce.main(argv) == 0
    printed = capsys.readouterr().out
    assert "FN pkg/train.py:30 AMP101 (cross-module)" not in printed and "FN pkg/train.py:30 AMP101:" in printed
    assert "only in the whole-tree run: pkg/eval.py:5 AMP301 m" in printed
    (package,) = json.loads(out.read_text())["packages"]
    assert package["tree"]["scores"]["AMP301"]["fp"] == 1
    assert package["single_file"]["scores"]["AMP301"]["ok"] == 1
    # a label whose file is not in the corpus folder is a labelling error: exit 2, nothing scored
    (tmp_path / "labels" / "pkg.toml").write_text(LABELS.replace("pkg/eval.py", "pkg/gone.py"))
    assert rce.main(argv) == 2
    assert "no such file" in capsys.readouterr().err


def test_missing_corpus_folder_is_skipped(tmp_path: Path, capsys) -> None:
    (tmp_path / "pkg.toml").write_text(LABELS)
    assert rce.main(["--corpus", str(tmp_path / "nowhere"), "--labels", str(tmp_path)]) == 0
    assert "SKIPPED" in capsys.readouterr().out


def test_a_label_file_names_its_split_and_figures_are_printed_per_split(tmp_path, capsys) -> None:
    """dev repositories shape the rules; test ones are scored once at the end: each gets its own figures."""
    for name, split in (("a", "dev"), ("b", "test")):
        (tmp_path / f"{name}.toml").write_text(f'corpus = "src/{name}"\nsplit = "{split}"\n')
    loaded = rce.load_label_files(tmp_path, None)
    assert {lf.name: lf.split for lf in loaded} == {"a": "dev", "b": "test"}
    assert [lf.name for lf in rce.load_label_files(tmp_path, None, ["test"])] == ["b"]
    (tmp_path / "c.toml").write_text('corpus = "src/c"\nsplit = "train"\n')
    with pytest.raises(rce.LabelError, match="split must be one of"):
        rce.load_label_files(tmp_path, None)
