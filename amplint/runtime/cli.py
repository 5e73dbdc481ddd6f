"""`amplint verify` (and the `compare` hand-off): run the training command under probes.

    amplint verify [--steps N] [--device cpu] [--nan-guard] [--report FILE] -- COMMAND...
    amplint verify train.py [ARGS...]          # shorthand for `python train.py ARGS...`

Order: static check of the script and the project files it imports (the agenda), the run with the
bootstrap in every Python process, merge, correlate, a table on stdout, the JSON report.
Exit code: the script's own when it failed, else 1 when anything is confirmed or found at runtime,
else 0; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] == "compare":
        try:
            compare = importlib.import_module("amplint.runtime.compare")
        except ModuleNotFoundError as exc:
            if exc.name != "amplint.runtime.compare":
                raise
            print("amplint: error: `amplint compare` is not available in this build (amplint.runtime.compare is missing)", file=sys.stderr)
            return EXIT_ERROR
        return compare.main(argv)
    if argv and argv[0] == "verify":
        argv = argv[1:]
    return verify(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amplint verify",
        description="Run a training command under probes; confirm static findings with evidence.",
        usage="amplint verify [options] -- COMMAND...  |  amplint verify [options] train.py [ARGS...]",
    )
    p.add_argument("--steps", type=int, default=None, help="stop cleanly after N optimizer steps")
    p.add_argument("--device", choices=("cpu",), default=None, help="emulate a CUDA script on the CPU")
    p.add_argument("--nan-guard", action="store_true", help="find the first module producing NaN/Inf (AMP901)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--profile", type=Path, help="profile the run into DIR (needs amplint.runtime.profiling)")
    p.add_argument("--evidence-dir", type=Path, help="keep the per-process evidence files here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command")
    return p


def parse(argv: list[str]):
    if "--" in argv:
        i = argv.index("--")
        opts, command = argv[:i], argv[i + 1 :]
        args = build_parser().parse_args(opts)
        args.command = command
    else:
        args = build_parser().parse_args(argv)
    if args.command and args.command[0].endswith(".py"):
        from amplint.runtime.launch import python_command

        args.command = python_command(args.command[0], args.command[1:])
    return args


def verify(argv: list[str]) -> int:
    try:
        args = parse(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code not in (0, None) else EXIT_CLEAN
    if not args.command:
        print("amplint verify: error: no command (use `amplint verify -- python train.py` or `amplint verify train.py`)", file=sys.stderr)
        return EXIT_ERROR
    if args.steps is not None and args.steps < 1:
        print("amplint verify: error: --steps must be at least 1", file=sys.stderr)
        return EXIT_ERROR
    try:
        import torch  # noqa: F401
    except ImportError:
        from amplint.runtime import TORCH_INSTALL_HINT

        print(f"amplint verify: error: {TORCH_INSTALL_HINT}", file=sys.stderr)
        return EXIT_ERROR

    from amplint.runtime import launch
    from amplint.runtime.agenda import static_agenda
    script = launch.script_of(args.command)
    diagnostics, errors = [], []
    if script and Path(script).is_file():
        diagnostics, _files, errors = static_agenda(Path(script))
    for e in errors:
        print(f"amplint verify: static check: {e}", file=sys.stderr)

    extra_env = {}
    if args.nan_guard:
        extra_env["AMPLINT_NAN_GUARD"] = "1"
    if args.profile is not None:
        ext = _profiling_extension(args.profile)
        if ext is None:
            print("amplint verify: error: --profile needs amplint.runtime.profiling, which is missing", file=sys.stderr)
            return EXIT_ERROR
        extra_env.update(ext)

    out_dir = args.evidence_dir or Path(tempfile.mkdtemp(prefix="amplint-verify-"))
    bar = None if args.no_progress else Progress(args.steps)
    try:
        outcome = launch.run_instrumented(
            args.command, steps=args.steps, device=args.device, out_dir=out_dir, extra_env=extra_env,
            on_progress=bar.update if bar else None,
        )
    finally:
        if bar:
            bar.close()
        if args.evidence_dir is None:
            launch.clean(out_dir)

    report, findings, runtime = make_report(outcome, diagnostics)
    print(render_table(report, findings, runtime))
    if args.profile is not None:  # summary computed from the trace JSON (compare/profile side)
        from amplint.runtime import trace_summary

        report["profile"] = trace_summary.summarize_dir(args.profile)
        print("\n".join(trace_summary.render(s) for s in report["profile"]) or f"profile: no trace written to {args.profile}")
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(_clean(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return exit_code_for(report)


def make_report(outcome, diagnostics):
    """(report dict, findings, runtime findings) for a finished run and its static agenda."""
    from amplint.runtime.correlate import correlate
    from amplint.runtime.probes import probed_codes

    reached = {tuple(r) for p in outcome.processes for r in p.get("reached", [])}
    findings, runtime = correlate(diagnostics, outcome.observations, reached, probed_codes())
    return build_report(outcome, findings, runtime), findings, runtime


def exit_code_for(report: dict) -> int:
    if report["exit_code"] != 0:
        return report["exit_code"]
    if any(f["status"] == "confirmed" for f in report["findings"]) or report["runtime_findings"]:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _profiling_extension(directory: Path) -> dict[str, str] | None:
    """Environment that turns profiling on, from amplint.runtime.profiling (the compare/profile side).

    Contract: that module exposes `verify_env(directory) -> dict[str, str]` (typically
    AMPLINT_EXTENSIONS plus its own settings)."""
    try:
        mod = importlib.import_module("amplint.runtime.profiling")
    except ModuleNotFoundError:
        return None
    fn = getattr(mod, "verify_env", None)
    return dict(fn(directory)) if fn else None


def build_report(outcome, findings, runtime) -> dict:
    from amplint.runtime.emulation import NOTES

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
    }
    if outcome.emulated:
        report["notes"] = [NOTES]
    if outcome.errors:
        report["probe_errors"] = outcome.errors[:20]
    return report


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
    text = " ".join(f"{k}={_fmt(v)}" for k, v in ev.items() if k not in ("scale_history",))
    return text if len(text) <= width else text[: width - 3] + "..."


def render_table(report: dict, findings, runtime) -> str:
    where = "CPU emulation of a CUDA run" if report["emulated"] else report["device"]
    lines = [f"amplint verify: {len(findings)} static finding(s) on the agenda, {where}, {report['steps']} step(s); {report['ended']}"]
    rows = [(f.code, f"{_rel(f.filename)}:{f.line}", f.status.upper().replace("-", " "), evidence_line(f.evidence)) for f in findings]
    rows += [(r.code, f"{_rel(r.filename)}:{r.line}", "RUNTIME", f"{r.message}; {evidence_line(r.evidence, 70)}") for r in runtime]
    if rows:
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        lines.append(f"{'code':<{w[0]}}  {'location':<{w[1]}}  {'status':<{w[2]}}  evidence")
        for r in rows:
            lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
    if report["emulated"]:
        lines.append("note: CPU emulation; CPU autocast casts differently from CUDA (see the report's notes)")
    return "\n".join(lines)


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


class Progress:
    """`[#####.....] 3/10 steps` on stderr: redrawn in place on a terminal, sparse lines otherwise."""

    def __init__(self, total: int | None, stream=None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_line = 0.0
        self.drawn = False
        self.value = -1
        self.printed = -1

    def update(self, steps: int) -> None:
        if steps == self.value:
            return
        self.value = steps
        if self.total:
            filled = int(20 * min(steps, self.total) / self.total)
            text = f"amplint verify [{'#' * filled}{'.' * (20 - filled)}] {steps}/{self.total} steps"
        else:
            text = f"amplint verify: {steps} steps"
        if self.tty:
            self.stream.write("\r" + text)
            self.drawn = True
        elif time.monotonic() - self.last_line > 5.0:
            self.last_line = time.monotonic()
            self.printed = steps
            self.stream.write(text + "\n")
        self.text = text
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
        elif self.value >= 0 and self.printed != self.value:
            self.stream.write(self.text + "\n")
        self.stream.flush()
