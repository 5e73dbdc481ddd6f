"""`amplint verify` (and the `compare` hand-off): run the training command under probes.

    amplint verify [--steps N] [--device cpu] [--nan-guard] [--timeout S] [--report FILE] -- COMMAND...
    amplint verify train.py [ARGS...]          # shorthand for `python train.py ARGS...` (a `--` in ARGS included)

Order: static check of the script and the project files it imports (the agenda), the run with the
bootstrap in every Python process, merge, correlate, a table on stdout, the JSON report.

Exit codes (`EXIT_*`; the README lists them too):
  0  the run took at least one optimizer step and nothing was confirmed or found
  1  a finding was confirmed, or something was found at run time
  2  usage error: a bad option, no command, a script that does not exist, no torch, an output
     path (--report, --evidence-dir, --profile) that cannot be written (checked before the run)
  3  nothing was verified though the command exited 0: the run took no optimizer step, or
     mixed precision never ran in it (no autocast region entered enabled, no GradScaler enabled,
     no float16/bfloat16 parameter or activation) and nothing was confirmed or found
  124  --timeout expired (the report is still written)
  128+N  verify itself received signal N (130 SIGINT, 143 SIGTERM); the command was ended and
       the report is still written
  else the command's own non-zero exit status, passed through
The report's `exit_source` ("command" or "verify") and the summary line say whose number it is:
a script that exits 1 or 3 itself is "command", not a finding or a run without a step.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_NO_STEP, EXIT_TIMEOUT = 0, 1, 2, 3, 124
EXIT_NOT_TESTED = EXIT_NO_STEP  # mixed precision never ran: nothing about it was tested

STATUS_LABEL = {"confirmed": "CONFIRMED", "not-confirmed": "NOT CONFIRMED", "not-reached": "NOT REACHED",
                "no-probe": "NO PROBE", "found": "RUNTIME", "suppressed": "SUPPRESSED"}


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] == "compare":
        from amplint.runtime import compare

        return compare.main(argv)
    if argv and argv[0] == "verify":
        argv = argv[1:]
    return verify(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amplint verify",
        description="Run a training command under probes; confirm static findings with evidence.",
        usage="amplint verify [options] -- COMMAND...  |  amplint verify [options] train.py [ARGS...]",
        epilog="exit: 0 clean, 1 findings, 2 usage error, 3 nothing verified (no optimizer step taken, or "
               "mixed precision never ran), 124 timed out, "
               "128+N verify got signal N; a failed command's own status passes through",
    )
    p.add_argument("--steps", type=int, default=None,
                   help="stop cleanly after N optimizer steps, counted per optimizer, a step GradScaler "
                        "skipped included; with several optimizers the run stops when any one of them "
                        "is about to take its step N+1")
    p.add_argument("--device", choices=("cpu",), default=None, help="emulate a CUDA script on the CPU")
    p.add_argument("--nan-guard", action="store_true", help="find where the first NaN/Inf appears, forward or backward, and its likely cause (AMP901)")
    # The run confirms or refutes each static finding, and only a confirmed one fails: so the static
    # pass runs the preview tier too (clip-before-unscale among it), unlike a plain `check`.
    p.add_argument("--preview", dest="preview", action="store_true", default=True,
                   help="the static pass runs the preview tier too (the default: the run confirms or refutes "
                        "each finding, and only a confirmed one fails)")
    p.add_argument("--no-preview", dest="preview", action="store_false",
                   help="the static pass runs what the script's [tool.amplint] selects, as a plain `check` does")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="end the whole run after SECONDS (exit 124)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--profile", type=Path, help="profile the run into DIR (CPU activity only with --device cpu)")
    p.add_argument("--evidence-dir", type=Path, help="keep the per-process evidence files here")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command")
    return p


def parse(argv: list[str]):
    from amplint.runtime.launch import parse_with_command, python_command

    args = parse_with_command(build_parser(), argv)
    if args.command and args.command[0].endswith(".py"):
        args.command = python_command(args.command[0], args.command[1:])
    return args


def _usage_error(message: str) -> int:
    print(f"amplint verify: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def verify(argv: list[str]) -> int:
    try:
        args = parse(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code not in (0, None) else EXIT_CLEAN
    if not args.command:
        return _usage_error("no command (use `amplint verify -- python train.py` or `amplint verify train.py`)")
    if args.steps is not None and args.steps < 1:
        return _usage_error("--steps must be at least 1")
    if args.timeout is not None and not args.timeout > 0:
        return _usage_error("--timeout must be a positive number of seconds")
    from amplint.runtime import launch

    script = launch.script_of(args.command)
    if script is not None and not Path(script).is_file():
        return _usage_error(f"no such script: {script}")
    # NB: before the run, not after it: a report that cannot be written would otherwise cost the
    # whole run and end in a traceback.
    for option, path, folder in (("--report", args.report, False), ("--evidence-dir", args.evidence_dir, True),
                                 ("--profile", args.profile, True)):
        why = None if path is None else launch.unwritable(path, directory=folder)
        if why:
            return _usage_error(f"{option}: {why}")
    # NB: looked up, not imported: importing torch here would cost every run a second or two in
    # verify's own process, and only the command's processes need it.
    if importlib.util.find_spec("torch") is None:
        from amplint.runtime import TORCH_INSTALL_HINT

        return _usage_error(TORCH_INSTALL_HINT)

    from amplint.runtime.agenda import selection as agenda_selection
    from amplint.runtime.agenda import static_agenda

    diagnostics, errors, selects = [], [], None
    if script:
        diagnostics, _files, errors = static_agenda(Path(script), preview=args.preview)
        try:
            selects = agenda_selection(Path(script))
        except Exception:  # noqa: BLE001 - an unreadable configuration was reported by the agenda
            selects = None
    for e in errors:
        print(f"amplint verify: static check: {e}", file=sys.stderr)

    extra_env = {}
    if args.nan_guard:
        extra_env["AMPLINT_NAN_GUARD"] = "1"
    if args.profile is not None:
        from amplint.runtime import profiling

        extra_env.update(profiling.verify_env(args.profile))

    out_dir = args.evidence_dir or Path(tempfile.mkdtemp(prefix="amplint-verify-"))
    bar = None if args.no_progress else Progress(args.steps)
    spans = [(d.path, d.span.line, max(d.span.end_line, d.span.line)) for d in diagnostics]
    try:
        outcome = launch.run_instrumented(
            args.command, steps=args.steps, device=args.device, out_dir=out_dir, extra_env=extra_env,
            on_progress=bar.update if bar else None, timeout=args.timeout, agenda=spans,
        )
    finally:
        if bar:
            bar.close()
        if args.evidence_dir is None:
            launch.clean(out_dir)

    report, findings, runtime = make_report(outcome, diagnostics, selects)
    if args.profile is not None:  # summary computed from the trace JSON (compare/profile side)
        from amplint.runtime import trace_summary

        report["profile"] = trace_summary.summarize_dir(args.profile, unreadable_ok=True)
    print(render_table(report, findings, runtime))
    if args.profile is not None:
        from amplint.runtime import trace_summary

        print("\n".join(trace_summary.render(s) for s in report["profile"]) or f"profile: no trace written to {args.profile}")
    if args.report is not None:
        try:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(json.dumps(_clean(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        except OSError as exc:  # it was writable before the run; something changed since
            return _usage_error(f"--report: cannot write {args.report}: {exc.strerror or exc}")
    return report["verify_exit"]


def make_report(outcome, diagnostics, selects=None):
    """(report dict, findings, runtime findings) for a finished run and its static agenda;
    `selects(file, code)`: the agenda configuration's selection (agenda.selection)."""
    from amplint.runtime.correlate import NoqaLookup, RunFacts, correlate
    from amplint.runtime.probes import probe_needs

    reached = {tuple(r) for p in outcome.processes for r in p.get("reached", [])}
    facts = RunFacts.from_processes(outcome.processes, emulated=outcome.emulated, steps=outcome.steps, ended=outcome.ended)
    findings, runtime = correlate(diagnostics, outcome.observations, reached, probe_needs(), facts, NoqaLookup(selects))
    report = build_report(outcome, findings, runtime)
    report["mixed_precision"] = facts.precision_json()
    report["status"], report["reason"], report["verify_exit"] = run_verdict(outcome, report)
    # Whose number verify_exit is: the command's own status passed through, or verify's verdict
    # (0, 1 findings, 3 no step, 124, 128+N). A script's own exit 1 or 3 reads as "command".
    report["exit_source"] = "command" if report["status"] == "command-failed" else "verify"
    return report, findings, runtime


def run_verdict(outcome, report: dict) -> tuple[str, str, int]:
    """(status, reason, verify's exit code) of the whole run (see the module docstring)."""
    if getattr(outcome, "timed_out", False):
        return "timed-out", outcome.ended, EXIT_TIMEOUT
    signame = getattr(outcome, "interrupted_by", None)
    if signame:
        return "interrupted", f"{signame} sent to verify: the command was ended", 128 + int(signal.Signals[signame])
    if report["exit_code"] != 0:
        return "command-failed", f"the command exited {report['exit_code']} ({outcome.ended})", report["exit_code"]
    if report["steps"] == 0:
        return "no-step", f"the run took no optimizer step, so nothing was verified ({outcome.ended})", EXIT_NO_STEP
    confirmed = sum(f["status"] == "confirmed" for f in report["findings"])
    found = sum(r["status"] == "found" for r in report["runtime_findings"])
    if confirmed or found:
        return "findings", f"{confirmed} confirmed, {found} found at run time", EXIT_FINDINGS
    precision = report.get("mixed_precision") or {"ran": True}
    if not precision["ran"]:
        n = len(report["findings"])
        untested = (f"none of the {n} static finding(s) could be tested, and no precision problem could show"
                    if n else "no precision problem could show")
        return "not-tested", f"{precision['summary']}: {untested}", EXIT_NOT_TESTED
    unchecked = [f["reason"] for f in report["findings"] if f["status"] == "not-confirmed" and f["reason"] not in ("behaved",)]
    unchecked += [f["reason"] for f in report["findings"] if f["status"] in ("not-reached", "no-probe")]
    tail = ""
    if unchecked:
        counts = {r: unchecked.count(r) for r in dict.fromkeys(unchecked)}
        tail = "; not checked by this run: " + ", ".join(f"{n} ({r})" for r, n in counts.items())
    return "clean", "nothing confirmed or found at run time" + tail, EXIT_CLEAN


def exit_code_for(report: dict) -> int:
    return report["verify_exit"]


def build_report(outcome, findings, runtime) -> dict:
    from amplint.runtime.emulation import LIMITS, NOTES

    device = "cpu" if outcome.emulated else _native_device(outcome)
    report = {
        "command": outcome.command,
        "device": device,
        "emulated": outcome.emulated,
        "steps": outcome.steps,
        "exit_code": outcome.exit_code,
        "findings": [f.as_json() for f in findings],
        "runtime_findings": [r.as_json() for r in runtime],
        # Beyond the schema: why the run ended, the ranks seen, emulation caveats.
        "ended": outcome.ended,
        "ranks": [p.get("label") for p in outcome.processes],
        "rank_ends": _rank_ends(outcome.processes),
        "wall_s": round(outcome.wall_s, 3),
    }
    if outcome.emulated:
        report["notes"] = [NOTES]
        report["emulation_limits"] = list(LIMITS)
        eager = sum((v or {}).get("compile_ran_eagerly", 0) for v in (outcome.extras.get("emulation") or {}).values())
        if eager:
            report["notes"].append(f"torch.compile was called {eager} time(s) and ran eagerly (CPU emulation)")
    if outcome.errors:
        report["probe_errors"] = outcome.errors[:20]
    return report


def _rank_ends(processes) -> list[dict]:
    from amplint.runtime.launch import rank_ends

    return [dict(e, at=None if e["at"] is None else round(e["at"], 3)) for e in rank_ends(processes)]


def _native_device(outcome) -> str:
    devs = {p.get("native_device") for p in outcome.processes if p.get("native_device")}
    return "cuda" if "cuda" in devs else (devs.pop() if devs else "unknown")


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v[:6]) + (",..." if len(v) > 6 else "") + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def evidence_line(ev: dict, width: int = 110) -> str:
    text = " ".join(f"{k}={_fmt(v)}" for k, v in ev.items() if k not in ("scale_history", "zero_grad_share_note"))
    return text if len(text) <= width else text[: width - 3] + "..."


def evidence_lines(ev: dict, width: int = 100, first: str = "") -> list[str]:
    """Every `key=value` of the evidence, whole, in lines of about `width` characters (the table
    wraps them: a cut-off row hid the very figures a verdict rests on)."""
    items = [f"{k}={_fmt(v)}" for k, v in ev.items() if k not in ("scale_history", "zero_grad_share_note")]
    lines, current = [], first
    for item in items:
        if current and len(current) + 1 + len(item) > width:
            lines.append(current)
            current = item
        else:
            current = f"{current} {item}" if current else item
    lines.append(current)
    return lines


def render_table(report: dict, findings, runtime) -> str:
    where = "CPU emulation of a CUDA run" if report["emulated"] else report["device"]
    lines = [f"amplint verify: {len(findings)} static finding(s) on the agenda, {where}, {report['steps']} step(s); {report['ended']}"]
    ends = report.get("rank_ends") or []
    if len(ends) > 1:  # how each rank ended; the first failure is the cause, later ones often its echo
        for e in ends:
            mark = "  <- failed first" if e["first_failure"] else ""
            lines.append(f"  {e['rank']}: {e['steps']} step(s), {_short(e['ended'])}{mark}")
    if report.get("mixed_precision") and report["steps"]:
        mp = report["mixed_precision"]
        lines.append(mp["summary"] if not mp["ran"] else f"mixed precision: {mp['summary']}")
    rows, hints = [], {}
    for f in findings:
        detail = evidence_lines(f.evidence) if f.status == "confirmed" else [f.why]
        rows.append((f.code, f"{_rel(f.filename)}:{f.line}", STATUS_LABEL[f.status], detail[0]))
        if detail[1:]:
            hints[len(rows) - 1] = detail[1:]
    for r in runtime:
        detail = evidence_lines(r.evidence, first=f"{r.message};")
        rows.append((r.code, f"{_rel(r.filename)}:{r.line}", STATUS_LABEL[r.status], detail[0]))
        more = detail[1:] + [f"hint: {r.hint}"] * bool(r.hint)
        if more:
            hints[len(rows) - 1] = more
    if rows:
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        lines.append(f"{'code':<{w[0]}}  {'location':<{w[1]}}  {'status':<{w[2]}}  detail")
        for i, r in enumerate(rows):
            lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
            for more in hints.get(i, []):
                lines.append(f"{'':<{w[0]}}  {'':<{w[1]}}  {'':<{w[2]}}  {more}")
    if report["emulated"]:
        lines.append("note: CPU emulation; CPU autocast casts differently from CUDA (see the report's notes)")
        lines += [f"note: {n}" for n in report["notes"][1:]]
    if report.get("exit_source") == "command":
        whose = "the command's own exit status, passed through"
    else:
        whose = f"verify's verdict; the command itself exited {report['exit_code']}"
    lines.append(f"amplint verify: {report['status']}: {report['reason']} (exit {report['verify_exit']}: {whose})")
    return "\n".join(lines)


def _short(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


class Progress:
    """`amplint verify [#####.....] 3/10 steps` on stderr, always a whole line of its own.

    The training command writes to the same terminal, so a bar redrawn in place would be glued to
    the script's next output (`...1/8 stepsiter 1: loss`).  Instead each update is one line, drawn
    only when the step count changed and at most every `every` seconds (2 on a terminal, 10 in a
    log), plus a last line at the end.  On a terminal the line starts by clearing the current one,
    so a bar the script draws in place (tqdm) is replaced rather than glued to.
    """

    def __init__(self, total: int | None, stream=None, every: float | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every if every is not None else (2.0 if self.tty else 10.0)
        self.value = -1
        self.printed = -1
        self.last_line = float("-inf")

    def text(self, steps: int) -> str:
        if self.total:
            filled = int(20 * min(steps, self.total) / self.total)
            return f"amplint verify [{'#' * filled}{'.' * (20 - filled)}] {steps}/{self.total} steps"
        return f"amplint verify: {steps} steps"

    def update(self, steps: int) -> None:
        self.value = steps
        if steps == self.printed or time.monotonic() - self.last_line < self.every:
            return
        self._draw(steps)

    def _draw(self, steps: int) -> None:
        self.last_line, self.printed = time.monotonic(), steps
        self.stream.write(("\r\033[K" if self.tty else "") + self.text(steps) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.value >= 0 and self.printed != self.value:
            self._draw(self.value)
