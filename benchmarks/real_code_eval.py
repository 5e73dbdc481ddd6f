"""Score amplint's bug rules against hand-made labels on real code (issue 13).

Each label file (`benchmarks/real_code/labels/<name>.toml`, format in the team's LABELS.md) names
one folder of the corpus (`/work/corpus`, fetched by `benchmarks/fetch_corpus.sh`) and a list of
cases: a place where amplint must report (`expect = "report"`) or must stay silent
(`expect = "silent"`) with a given code.  This script runs amplint on that folder as a user would
in CI (one whole-tree run, paths relative to the folder) and, with `--single-file`, once more per
labelled file as pre-commit would pass it, then prints per rule:

  TP        report cases found             FN   report cases missed
  FP        silent cases reported          OK   silent cases kept silent
  UNJUDGED  findings that match no case: listed one per line so that someone reads and labels them
  precision TP / (TP + FP)                 recall TP / (TP + FN)      ("-" when undefined)

A finding matches a case when path, code and line (the case's `line` or one of its `alt_lines`)
agree.  Each finding is used for at most one case (a maximum matching, so one finding cannot
count twice); a further finding at a location that is already judged (the same code reported
twice on one line) is a duplicate, counted apart, not unjudged.

Unjudged findings are in neither precision nor recall: precision here is that of the judged
findings only, and the UNJUDGED list says how much is left to read.

Run:   python benchmarks/real_code_eval.py [--corpus /work/corpus] [--labels benchmarks/real_code/labels]
                                           [--amplint "python -m amplint"] [--only NAME ...]
                                           [--single-file] [--jobs N] [--json OUT]
Exit:  0 when the measurement ran (whatever the figures), 2 when a label file is malformed or
       amplint could not produce a report.  A label file whose corpus folder is not on this machine
       is skipped with a note (the corpus is fetched separately).

Standard library only (tomllib; tomli on Python 3.10, which amplint already depends on there).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LABELS = ROOT / "benchmarks" / "real_code" / "labels"
DEFAULT_CORPUS = Path("/work/corpus")
# The bug rules, by prefix so that codes added later (AMP109, AMP110, AMP112, AMP206, AMP305, ...)
# are selected without touching this script; the deprecation rules are not bug rules; the opt-in
# AMP302/AMP502 are selected for the extra data.
SELECTION = (
    "--select", "AMP1,AMP2,AMP3,AMP4,AMP5",
    "--ignore", "AMP401,AMP402",
    "--extend-select", "AMP302,AMP502",
)
# Every tier is measured: a preview rule graduates on these figures (rule_catalog.py, `tier`).
AMPLINT_FLAGS = ("--isolated", "--no-cache", "--exit-zero", "--preview", "--output-format", "json", *SELECTION)

CODE = re.compile(r"^AMP\d{3}$")
CASE_KEYS = {"path", "line", "alt_lines", "code", "expect", "why", "cross_module"}
CASE_REQUIRED = {"path", "line", "code", "expect", "why"}
TOP_KEYS = {"corpus", "case", "split"}
EXPECTS = ("report", "silent")
# Which part of the evaluation a label file belongs to: `dev` repositories shape rules and
# fixtures; `test` repositories are read by nobody who changes a rule and scored once, at the end
# of a piece of work (the headline figure); files without a split are the earlier labelled sets,
# kept as regressions.
SPLITS = ("dev", "test", "legacy")


class LabelError(Exception):
    """A label file that cannot be scored (the message names the file and the case)."""


class AmplintError(Exception):
    """amplint ran but produced no usable report."""


@dataclass(frozen=True)
class Case:
    path: str
    line: int
    code: str
    expect: str
    why: str
    alt_lines: tuple[int, ...] = ()
    cross_module: bool = False

    @property
    def lines(self) -> tuple[int, ...]:
        return (self.line, *self.alt_lines)

    def where(self) -> str:
        return f"{self.path}:{self.line} {self.code}"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str
    message: str = ""

    def where(self) -> str:
        return f"{self.path}:{self.line} {self.code} {self.message}"


def _key(path: str, code: str, line: int) -> tuple[str, str, int]:
    """What a case and a finding must share to match."""
    return (path, code, line)


@dataclass
class LabelFile:
    name: str
    source: Path
    corpus: str
    cases: list[Case]
    split: str = "legacy"


# ---------------------------------------------------------------------------------------------
# Reading label files


def _check_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LabelError(f"{what} must be a positive integer, got {value!r}")
    return value


def _relative_path(value, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LabelError(f"{what} must be a non-empty string, got {value!r}")
    p = PurePosixPath(value.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts:
        raise LabelError(f"{what} must be relative and stay inside its folder, got {value!r}")
    return str(p)


def _parse_case(raw, where: str) -> Case:
    if not isinstance(raw, dict):
        raise LabelError(f"{where}: a case must be a table ([[case]])")
    unknown = set(raw) - CASE_KEYS
    if unknown:  # a typo such as `alt_line` would otherwise be silently ignored
        raise LabelError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(CASE_KEYS)})")
    missing = CASE_REQUIRED - set(raw)
    if missing:
        raise LabelError(f"{where}: missing key(s) {sorted(missing)}")
    code = raw["code"]
    if not isinstance(code, str) or not CODE.match(code):
        raise LabelError(f"{where}: code must look like AMP123, got {code!r}")
    if raw["expect"] not in EXPECTS:
        raise LabelError(f"{where}: expect must be one of {EXPECTS}, got {raw['expect']!r}")
    if not isinstance(raw["why"], str) or not raw["why"].strip():
        raise LabelError(f"{where}: why must say why (a non-empty string)")
    alt = raw.get("alt_lines", [])
    if not isinstance(alt, list):
        raise LabelError(f"{where}: alt_lines must be a list of line numbers, got {alt!r}")
    cross = raw.get("cross_module", False)
    if not isinstance(cross, bool):
        raise LabelError(f"{where}: cross_module must be true or false, got {cross!r}")
    line = _check_int(raw["line"], f"{where}: line")
    alt_lines = tuple(_check_int(a, f"{where}: alt_lines entry") for a in alt)
    if line in alt_lines:
        raise LabelError(f"{where}: alt_lines repeats line {line}")
    return Case(
        path=_relative_path(raw["path"], f"{where}: path"),
        line=line,
        code=code,
        expect=raw["expect"],
        why=raw["why"].strip(),
        alt_lines=alt_lines,
        cross_module=cross,
    )


def parse_labels(text: str, source: Path) -> LabelFile:
    """Parse and validate one label file; raise LabelError with the reason."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LabelError(f"{source}: not valid TOML: {e}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise LabelError(f"{source}: unknown top-level key(s) {sorted(unknown)} (allowed: {sorted(TOP_KEYS)})")
    if "corpus" not in data:
        raise LabelError(f"{source}: missing `corpus = \"src/<folder>\"`")
    corpus = _relative_path(data["corpus"], f"{source}: corpus")
    raw_cases = data.get("case", [])
    if not isinstance(raw_cases, list):
        raise LabelError(f"{source}: `case` must be an array of tables ([[case]])")
    cases = [_parse_case(raw, f"{source}: case {i + 1}") for i, raw in enumerate(raw_cases)]
    _check_consistent(cases, source)
    split = data.get("split", "legacy")
    if "split" in data and split not in SPLITS[:2]:
        raise LabelError(f"{source}: split must be one of {list(SPLITS[:2])} (or absent for the earlier sets), got {split!r}")
    return LabelFile(name=source.stem, source=source, corpus=corpus, cases=cases, split=split)


def _check_consistent(cases: list[Case], source: Path) -> None:
    """A labelling slip: two cases at the same (path, code, line), or a report and a silent case
    that one finding could both match.  (Two report cases may share an alternative line: the
    matching gives each finding to one case.)"""
    primary: dict[tuple[str, str, int], Case] = {}
    expected: dict[tuple[str, str, int], Case] = {}
    for case in cases:
        key = _key(case.path, case.code, case.line)
        if key in primary:
            raise LabelError(f"{source}: {case.where()} is labelled twice ({primary[key].expect}, {case.expect})")
        primary[key] = case
        for line in case.lines:
            other = expected.setdefault(_key(case.path, case.code, line), case)
            if other.expect != case.expect:
                raise LabelError(
                    f"{source}: {case.where()} ({case.expect}) and {other.where()} ({other.expect}) "
                    f"both judge line {line}"
                )


def load_label_files(directory: Path, only: list[str] | None, splits: list[str] | None = None) -> list[LabelFile]:
    files = sorted(directory.glob("*.toml"))
    if only:
        wanted = set(only)
        missing = wanted - {f.stem for f in files}
        if missing:
            raise LabelError(f"--only: no label file named {sorted(missing)} in {directory}")
        files = [f for f in files if f.stem in wanted]
    loaded = [parse_labels(f.read_text(encoding="utf-8"), f) for f in files]
    return [lf for lf in loaded if not splits or lf.split in splits]


def check_cases_exist(labels: LabelFile, folder: Path) -> None:
    """Every labelled line must exist, or the label can never match (a stale or mistyped path)."""
    lengths: dict[str, int] = {}
    for case in labels.cases:
        if case.path not in lengths:
            target = folder / case.path
            if not target.is_file():
                raise LabelError(f"{labels.source}: {case.where()}: no such file {target}")
            lengths[case.path] = len(target.read_text(encoding="utf-8", errors="replace").splitlines())
        if max(case.lines) > lengths[case.path]:
            raise LabelError(f"{labels.source}: {case.where()}: {case.path} has {lengths[case.path]} lines")


# ---------------------------------------------------------------------------------------------
# Running amplint


def _normalise(path: str) -> str:
    return str(PurePosixPath(path.replace("\\", "/")))  # drops a leading "./"


def parse_findings(stdout: str) -> list[Finding]:
    """amplint's JSON report (ruff's keys) -> findings."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as e:
        raise AmplintError(f"amplint did not print a JSON report ({e}); first output: {stdout[:300]!r}") from None
    try:
        return [
            Finding(_normalise(d["filename"]), int(d["location"]["row"]), d["code"], d.get("message", ""))
            for d in data
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise AmplintError(f"unexpected JSON report shape ({e!r})") from None


def run_amplint(command: list[str], folder: Path, targets: list[str], jobs: int | None) -> list[Finding]:
    """One amplint run in `folder` (so paths come out relative to it) on `targets`."""
    argv = [*command, "check", *targets, *AMPLINT_FLAGS]
    if jobs is not None:
        argv += ["--jobs", str(jobs)]
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AmplintError(f"`{shlex.join(argv)}` in {folder} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return parse_findings(proc.stdout)


# ---------------------------------------------------------------------------------------------
# Matching and scoring


@dataclass
class CodeScore:
    tp: int = 0
    fn: int = 0
    fp: int = 0
    ok: int = 0  # silent cases that stayed silent
    unjudged: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def add(self, other: CodeScore) -> None:
        self.tp += other.tp
        self.fn += other.fn
        self.fp += other.fp
        self.ok += other.ok
        self.unjudged += other.unjudged


@dataclass
class Result:
    """Each case's verdict and what is left over."""

    verdicts: list[tuple[Case, str, Finding | None]] = field(default_factory=list)  # TP/FN/FP/OK
    unjudged: list[Finding] = field(default_factory=list)
    duplicates: list[Finding] = field(default_factory=list)

    def cross_module_found(self) -> tuple[int, int]:
        """(found, all) report cases whose evidence lies in another module: the project model's share."""
        cross = [v for c, v, _ in self.verdicts if c.cross_module and c.expect == "report"]
        return cross.count("TP"), len(cross)

    def by_code(self) -> dict[str, CodeScore]:
        scores: dict[str, CodeScore] = {}
        for case, verdict, _ in self.verdicts:
            s = scores.setdefault(case.code, CodeScore())
            setattr(s, verdict.lower(), getattr(s, verdict.lower()) + 1)
        for f in self.unjudged:
            scores.setdefault(f.code, CodeScore()).unjudged += 1
        return dict(sorted(scores.items()))


def match(cases: list[Case], findings: list[Finding]) -> dict[int, int]:
    """A maximum matching case index -> finding index (Kuhn's augmenting paths; the sets are tiny).

    Candidates are tried primary line first, so an exact hit is preferred where there is a choice.
    """
    at: dict[tuple[str, str, int], list[int]] = {}
    for j, f in enumerate(findings):
        at.setdefault(_key(f.path, f.code, f.line), []).append(j)
    candidates = [[j for line in c.lines for j in at.get(_key(c.path, c.code, line), [])] for c in cases]
    owner: dict[int, int] = {}  # finding -> case

    def augment(i: int, visited: set[int]) -> bool:
        for j in candidates[i]:
            if j in visited:
                continue
            visited.add(j)
            if j not in owner or augment(owner[j], visited):
                owner[j] = i
                return True
        return False

    for i in range(len(cases)):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def score(cases: list[Case], findings: list[Finding]) -> Result:
    matched = match(cases, findings)
    result = Result()
    for i, case in enumerate(cases):
        hit = findings[matched[i]] if i in matched else None
        if case.expect == "report":
            verdict = "TP" if hit else "FN"
        else:
            verdict = "FP" if hit else "OK"
        result.verdicts.append((case, verdict, hit))
    used = set(matched.values())
    judged = {_key(c.path, c.code, line) for c in cases for line in c.lines}
    for j, f in enumerate(findings):
        if j in used:
            continue
        (result.duplicates if _key(f.path, f.code, f.line) in judged else result.unjudged).append(f)
    return result


def compare_single_file(tree: list[Finding], single: list[Finding], files: list[str]) -> list[str]:
    """Findings in the labelled files that differ between the whole-tree and the one-file runs."""
    in_files = set(files)
    whole = Counter(f for f in tree if f.path in in_files)
    alone = Counter(single)
    lines = [f"only in the whole-tree run: {f.where()}" for f in sorted((whole - alone).elements(), key=_order)]
    lines += [f"only in the single-file run: {f.where()}" for f in sorted((alone - whole).elements(), key=_order)]
    return lines


def _order(f: Finding) -> tuple:
    return (f.path, f.line, f.code)


# ---------------------------------------------------------------------------------------------
# Printing


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(scores: dict[str, CodeScore]) -> list[str]:
    header = f"  {'rule':<8} {'TP':>4} {'FN':>4} {'FP':>4} {'OK':>4} {'UNJUDGED':>9} {'precision':>10} {'recall':>7}"
    rows = [header]
    total = CodeScore()
    for code, s in scores.items():
        total.add(s)
        rows.append(_row(code, s))
    rows.append(_row("total", total))
    return rows


def _row(name: str, s: CodeScore) -> str:
    return (
        f"  {name:<8} {s.tp:>4} {s.fn:>4} {s.fp:>4} {s.ok:>4} {s.unjudged:>9} "
        f"{_ratio(s.precision):>10} {_ratio(s.recall):>7}"
    )


def format_result(title: str, result: Result) -> list[str]:
    out = [title, *format_table(result.by_code())]
    found, cross = result.cross_module_found()
    if cross:
        out.append(f"  cross-module report cases found: {found} of {cross}")
    for case, verdict, _ in result.verdicts:
        if verdict in ("FN", "FP"):
            out.append(f"  {verdict} {case.where()}{' (cross-module)' if case.cross_module else ''}: {case.why}")
    for f in sorted(result.unjudged, key=_order):
        out.append(f"  UNJUDGED {f.where()}")
    if result.duplicates:
        out.append(f"  ({len(result.duplicates)} duplicate finding(s) at judged locations)")
    return out


def write_figures(path: Path, scores: dict[str, CodeScore], measured_on: str) -> None:
    """amplint/rule_figures.py: per rule (TP, FP, FN) on what was scored, generated, never edited."""
    rows = "".join(f"    {code!r}: ({s.tp}, {s.fp}, {s.fn}),\n" for code, s in scores.items() if CODE.match(code))
    path.write_text(
        '"""Each rule\'s measured figures on real code: (true positives, false positives, misses).\n\n'
        "Generated by `python benchmarks/real_code_eval.py --split test --write-figures amplint/rule_figures.py`;\n"
        "do not edit.  `amplint rules` and the rule pages show them; tests/test_registry.py holds every\n"
        'stable rule to a precision of 0.90 on them (rule_catalog.py, `tier`).\n"""\n\n'
        f"MEASURED_ON = {measured_on!r}\n\nFIGURES: dict[str, tuple[int, int, int]] = {{\n{rows}}}\n",
        encoding="utf-8",
    )


def merge_scores(results: list[Result]) -> dict[str, CodeScore]:
    merged: dict[str, CodeScore] = {}
    for r in results:
        for code, s in r.by_code().items():
            merged.setdefault(code, CodeScore()).add(s)
    return dict(sorted(merged.items()))


def _result_json(result: Result) -> dict:
    return {
        "scores": {
            code: {**asdict(s), "precision": s.precision, "recall": s.recall}
            for code, s in result.by_code().items()
        },
        "cases": [
            {**asdict(case), "alt_lines": list(case.alt_lines), "verdict": verdict, "found_at": hit and hit.line}
            for case, verdict, hit in result.verdicts
        ],
        "cross_module_found": list(result.cross_module_found()),
        "unjudged": [asdict(f) for f in sorted(result.unjudged, key=_order)],
        "duplicates": [asdict(f) for f in sorted(result.duplicates, key=_order)],
    }


# ---------------------------------------------------------------------------------------------


@dataclass
class Evaluation:
    labels: LabelFile
    seconds: float
    tree: Result
    single: Result | None = None
    differences: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {
            "name": self.labels.name,
            "corpus": self.labels.corpus,
            "split": self.labels.split,
            "seconds": round(self.seconds, 1),
            "tree": _result_json(self.tree),
        }
        if self.single is not None:
            out["single_file"] = {**_result_json(self.single), "differences": self.differences}
        return out


def evaluate(labels: LabelFile, args: argparse.Namespace, command: list[str]) -> Evaluation | None:
    """Run, score and print one label file; None when its corpus folder is not here."""
    folder = args.corpus / labels.corpus
    if not folder.is_dir():
        print(f"== {labels.name}: SKIPPED, corpus folder {folder} not found (benchmarks/fetch_corpus.sh)\n")
        return None
    check_cases_exist(labels, folder)
    start = time.perf_counter()
    tree = run_amplint(command, folder, ["."], args.jobs)
    evaluation = Evaluation(labels, time.perf_counter() - start, score(labels.cases, tree))
    title = f"== {labels.name} ({labels.corpus}, {len(labels.cases)} cases, whole tree, {evaluation.seconds:.0f} s)"
    print("\n".join(format_result(title, evaluation.tree)) + "\n")
    if args.single_file:
        files = sorted({c.path for c in labels.cases})
        single = [f for path in files for f in run_amplint(command, folder, [path], args.jobs)]
        evaluation.single = score(labels.cases, single)
        evaluation.differences = compare_single_file(tree, single, files)
        lines = format_result(f"== {labels.name}, one file at a time ({len(files)} files)", evaluation.single)
        lines += [f"  {d}" for d in evaluation.differences] or ["  same findings as the whole-tree run in these files"]
        print("\n".join(lines) + "\n")
    return evaluation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus root (default: %(default)s)")
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS, help="label folder (default: %(default)s)")
    parser.add_argument(
        "--amplint", default=None, help='amplint command line (default: this interpreter\'s "python -m amplint")'
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="label file names (stems) to score")
    parser.add_argument("--single-file", action="store_true", help="also run amplint once per labelled file")
    parser.add_argument("--jobs", type=int, default=None, help="passed to amplint check --jobs")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every verdict and figure to OUT")
    parser.add_argument("--split", nargs="+", choices=SPLITS, help="score only these splits (default: all)")
    parser.add_argument("--write-figures", type=Path, metavar="PY",
                        help="write the whole-tree figures per rule to PY (amplint/rule_figures.py): what "
                             "`amplint rules` and the rule pages show; score the test split for it")
    parser.add_argument("--measured-on", default=None, help="with --write-figures: what was scored, in words")
    args = parser.parse_args(argv)
    command = shlex.split(args.amplint) if args.amplint else [sys.executable, "-m", "amplint"]
    try:
        label_files = load_label_files(args.labels, args.only, args.split)
        evaluations = [e for lf in label_files if (e := evaluate(lf, args, command)) is not None]
    except (LabelError, AmplintError) as e:
        print(f"real_code_eval: {e}", file=sys.stderr)
        return 2
    present = [split for split in SPLITS if any(lf.split == split for lf in label_files)]
    groups = [("all label files", None)] + ([(f"split {split}", split) for split in present] if len(present) > 1 else [])
    for title, split in groups:
        chosen = [e for e in evaluations if split is None or e.labels.split == split]
        for name, results in (
            ("whole tree", [e.tree for e in chosen]),
            ("one file at a time", [e.single for e in chosen if e.single is not None]),
        ):
            if results:
                found, cross = (sum(n) for n in zip(*(r.cross_module_found() for r in results)))
                lines = [f"== {title} ({len(results)}), {name}", *format_table(merge_scores(results))]
                print("\n".join([*lines, f"  cross-module report cases found: {found} of {cross}", ""]))
    if args.write_figures:
        write_figures(args.write_figures, merge_scores([e.tree for e in evaluations]),
                      args.measured_on or f"{len(evaluations)} label files ({', '.join(args.split or SPLITS)})")
    if args.json:
        payload = {"amplint": shlex.join(command), "packages": [e.to_json() for e in evaluations]}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
