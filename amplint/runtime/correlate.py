"""Static diagnostics x runtime observations -> verdicts (confirmed | not-reached | not-confirmed).

- confirmed: a probe of the same code recorded an observation at the diagnostic's line (the
  observation's own call, or one of its user frames, so a finding anchored at a helper's call site
  matches an observation made inside the helper);
- not-confirmed: the line ran (some intercepted call happened there) and nothing was observed;
- not-reached: the line never ran in the steps given.
AMP401 also confirms an import line when torch warned about the same symbol elsewhere in the file.

Observations with no static diagnostic are runtime findings: AMP9xx by design, and any other code
is a static false negative (turn it into a `bad_` fixture).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

RUNTIME_ONLY = {"AMP901", "AMP902", "AMP903"}


@dataclass
class Finding:
    code: str
    filename: str
    line: int
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "filename": self.filename, "line": self.line, "status": self.status, "evidence": self.evidence}


@dataclass
class RuntimeFinding:
    code: str
    filename: str
    line: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "filename": self.filename, "line": self.line, "message": self.message, "evidence": self.evidence}


def _real(path: str) -> str:
    return os.path.realpath(path)


def _covers(obs: dict, file: str, line: int, end_line: int) -> bool:
    frames = [[obs["file"], obs["line"], obs.get("end_line", obs["line"])], *obs.get("stack", [])]
    for f, a, b in frames:
        if f == file and a <= end_line and line <= b:
            return True
    return False


def _symbol(message: str) -> str | None:
    m = re.search(r"`([^`]+)`", message)
    return m.group(1).split("(")[0].rsplit(".", 1)[-1] if m else None


def _with_rank(ev: dict, obs: list[dict]) -> dict:
    ev = dict(ev)
    ranks = sorted({o.get("rank", "main") for o in obs})
    if ranks != ["main"]:
        ev["ranks"] = ranks
    ev["times_seen"] = sum(o.get("count", 1) for o in obs)
    return ev


def correlate(diagnostics, observations: list[dict], reached: set[tuple[str, int, int]], probed: set[str]):
    """(findings, runtime_findings) for the static agenda and what the run recorded."""
    findings: list[Finding] = []
    used: set[int] = set()
    reached_files = {f for f, _, _ in reached}
    for d in diagnostics:
        file = _real(d.path)
        line, end = d.span.line, max(d.span.end_line, d.span.line)
        hits = [i for i, o in enumerate(observations) if o["code"] == d.code and _covers(o, file, line, end)]
        if not hits and d.code == "AMP401":
            sym = _symbol(d.message)
            hits = [i for i, o in enumerate(observations) if o["code"] == "AMP401" and o["file"] == file and sym and f".{sym}(" in o["evidence"].get("warning", "")]
        if hits:
            used.update(hits)
            obs = [observations[i] for i in hits]
            ev = _with_rank(obs[0]["evidence"], obs)
            if obs[0]["line"] != line or obs[0]["file"] != file:
                ev["observed_at"] = f"{os.path.relpath(obs[0]['file'])}:{obs[0]['line']}"
            findings.append(Finding(d.code, d.path, line, "confirmed", ev, d.message))
            continue
        ran = any(f == file and a <= end and line <= b for f, a, b in reached)
        if d.code == "AMP401" and file in reached_files:
            ran = True  # imports run with the module; a warning would have come from its call
        ev: dict[str, Any] = {}
        if d.code not in probed:
            ev["note"] = f"no runtime probe for {d.code}"
        findings.append(Finding(d.code, d.path, line, "not-confirmed" if ran else "not-reached", ev, d.message))
    runtime: list[RuntimeFinding] = []
    for i, o in enumerate(observations):
        if i in used:
            continue
        if o["code"] not in RUNTIME_ONLY:
            if any(o["code"] == f.code and f.status == "confirmed" and _covers(o, _real(f.filename), f.line, f.line) for f in findings):
                continue
            msg = f"{o['code']} seen at runtime with no static finding here (static false negative)"
        else:
            msg = runtime_message(o)
        ev = dict(o["evidence"])
        if o.get("rank", "main") != "main":
            ev["rank"] = o["rank"]
        ev["times_seen"] = o.get("count", 1)
        runtime.append(RuntimeFinding(o["code"], o["file"], o["line"], msg, ev))
    return findings, _merge_ranks(runtime)


def _merge_ranks(items: list[RuntimeFinding]) -> list[RuntimeFinding]:
    out: dict[tuple, RuntimeFinding] = {}
    for r in items:
        key = (r.code, r.filename, r.line)
        if key in out:
            prev = out[key]
            ranks = set(prev.evidence.get("ranks", [prev.evidence.get("rank", "main")]))
            ranks.add(r.evidence.get("rank", "main"))
            prev.evidence["ranks"] = sorted(ranks)
            prev.evidence.pop("rank", None)
            continue
        out[key] = r
    return list(out.values())


def runtime_message(o: dict) -> str:
    ev = o["evidence"]
    if o["code"] == "AMP901":
        return f"first non-finite forward output: `{ev.get('module')}` ({ev.get('dtype')}) at step {ev.get('step')}"
    if o["code"] == "AMP902":
        return f"{ev.get('summary', 'GradScaler skipped steps')} (min scale {ev.get('min_scale')})"
    if o["code"] == "AMP903":
        share = ev.get("lost_update_share") or 0.0
        return f"{share:.0%} of updates lost in {'/'.join(ev.get('param_dtypes', []))} weights ({ev.get('optimizer')})"
    return o["code"]
