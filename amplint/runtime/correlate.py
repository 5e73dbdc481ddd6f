"""Static diagnostics x runtime observations -> verdicts, each with a reason.

Statuses (what the table prints in capitals):
- confirmed: a probe of the same code recorded an observation at the diagnostic's line (the
  observation's own call, or one of its user frames, so a finding anchored at a helper's call site
  matches an observation made inside the helper);
- not-confirmed: the line ran and the probe saw nothing wrong, or could not have seen it (AMP was
  off, the call raised): the `reason` says which;
- not-reached: the line never ran in the steps given;
- no-probe: the line ran, and the rule has no runtime probe (the static finding stands as it is).

Every verdict carries `reason`, a slug from `REASONS`, and `why`, one sentence for people.
AMP401 also confirms an import line when torch warned about the same symbol elsewhere in the file.

Observations with no static diagnostic are runtime findings: AMP9xx by design; any other code was
found at run time although `check` did not report it: a miss to report (`missed-by-check`) when the
autocast and GradScaler arguments that decide it are written in the source, `run-settings` when one
is a value the script sets when it runs (`dtype=args.dtype`), which `check` does not evaluate; or a
line whose finding is suppressed with `# noqa`, which verify honours: such a finding is listed as
suppressed and does not count.  Each runtime finding has a `why` too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from amplint.runtime.probes import CONFIRMS_ONLY

RUNTIME_ONLY = {"AMP901", "AMP902", "AMP903", "AMP904", "AMP905"}

# reason slug -> the sentence the table and the JSON `why` give (formatted with the facts).
REASONS = {
    "observed": "seen at this line",
    "observed-in-call": "seen in a call made from this line ({where})",
    "warned": "torch warned about it in this file ({where})",
    "behaved": "the line ran{active} and the probe saw nothing wrong",
    "no-scaler": "the line ran, but no GradScaler was built, so there was nothing to observe",
    "scaler-disabled": "the line ran, but every GradScaler was built disabled ({how})",
    "autocast-not-entered": "the line ran, but no autocast region was entered",
    "autocast-disabled": "the line ran, but {where}",
    "amp-switched-off": "the line ran, but the script switched AMP off ({how})",
    "no-amp": "the line ran, but the run used no AMP at all ({how})",
    "call-raised": "the call at this line raised ({error}): nothing is concluded from it",
    "not-run": "this line did not run{during}",
    "not-seen": "no intercepted call ran at this line{during} (line tracking was {mode})",
    "no-probe": "the line ran; {code} has no runtime probe, so the static finding stands as reported",
}

# Under CPU emulation, the usual way a script switches AMP off without meaning to.
EMULATION_HINT = (
    "under --device cpu tensors are really on the CPU, and a script that decides AMP from a "
    "tensor's device (`x.device.type == 'cuda'`) turns it off: emulation cannot fake that"
)


@dataclass
class Finding:
    code: str
    filename: str
    line: int
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    reason: str = ""
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "filename": self.filename, "line": self.line, "status": self.status,
                "reason": self.reason, "why": self.why, "evidence": self.evidence}


@dataclass
class RuntimeFinding:
    code: str
    filename: str
    line: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    status: str = "found"  # found | suppressed (a `# noqa` for this code on that line)
    reason: str = "runtime-only"  # runtime-only (AMP9xx) | missed-by-check | run-settings | noqa
    hint: str = ""
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        out = {"code": self.code, "filename": self.filename, "line": self.line, "message": self.message,
               "status": self.status, "reason": self.reason, "why": self.why, "evidence": self.evidence}
        if self.hint:
            out["hint"] = self.hint
        return out


@dataclass
class RunFacts:
    """What the whole run (every process) says about AMP being on: built from the evidence."""

    scalers_built: int = 0
    scalers_enabled: int = 0
    scalers_disabled_by_script: int = 0
    scalers_disabled_by_torch: int = 0
    autocast_entered: int = 0
    autocast_enabled: int = 0
    autocast_disabled_at: list = field(default_factory=list)
    raised: list = field(default_factory=list)
    emulated: bool = False
    steps: int = 0
    ended: str = ""
    reach_mode: str = "calls"
    scaler_steps: int = 0  # GradScaler.step calls on an enabled scaler
    scaler_skipped: int = 0  # of those, the steps it skipped (inf/NaN gradients)
    autocast_regions: dict = field(default_factory=dict)  # {"cpu float16": times entered enabled}
    reduced_parameters: dict = field(default_factory=dict)  # {dtype: optimizer parameters}
    reduced_casts: dict = field(default_factory=dict)  # {dtype: module/parameter casts}
    reduced_activations: dict = field(default_factory=dict)  # {dtype: first module class}
    autocast_enabled_at: list = field(default_factory=list)  # [file, line, end_line] of enabled regions
    scalers_enabled_at: list = field(default_factory=list)  # ... of enabled GradScalers' construction

    @classmethod
    def from_processes(cls, processes: list[dict[str, Any]], *, emulated: bool = False, steps: int = 0, ended: str = "") -> "RunFacts":
        facts = cls(emulated=emulated, steps=steps, ended=ended)
        modes = set()
        for p in processes:
            amp = (p.get("extra") or {}).get("amp_facts") or {}
            s, a = amp.get("scalers") or {}, amp.get("autocast") or {}
            facts.scalers_built += s.get("built", 0)
            facts.scalers_enabled += s.get("enabled", 0)
            facts.scalers_disabled_by_script += s.get("disabled_by_script", 0)
            facts.scalers_disabled_by_torch += s.get("disabled_by_torch", 0)
            facts.autocast_entered += a.get("entered", 0)
            facts.autocast_enabled += a.get("enabled", 0)
            facts.autocast_disabled_at += [x for x in a.get("disabled_at", []) if x not in facts.autocast_disabled_at]
            facts.raised += amp.get("raised", [])
            facts.scaler_steps += s.get("steps", 0)
            facts.scaler_skipped += s.get("skipped", 0)
            _add_counts(facts.autocast_regions, a.get("regions") or {})
            reduced = amp.get("reduced") or {}
            _add_counts(facts.reduced_parameters, reduced.get("parameters") or {})
            _add_counts(facts.reduced_casts, reduced.get("casts") or {})
            facts.autocast_enabled_at += [x for x in a.get("enabled_at", []) if x not in facts.autocast_enabled_at]
            facts.scalers_enabled_at += [x for x in s.get("enabled_at", []) if x not in facts.scalers_enabled_at]
            for dtype, module in (reduced.get("activations") or {}).items():
                facts.reduced_activations.setdefault(dtype, module)
            modes.add(p.get("reach_mode", "calls"))
        if modes:
            facts.reach_mode = "lines" if modes == {"lines"} else sorted(modes)[0]
        return facts

    @property
    def mixed_precision_ran(self) -> bool:
        """Did anything of mixed precision run: an enabled autocast region, an enabled GradScaler,
        a float16/bfloat16 parameter or activation?"""
        return bool(self.autocast_enabled or self.scalers_enabled or self.reduced_parameters
                    or self.reduced_casts or self.reduced_activations)

    def precision_summary(self) -> str:
        """One sentence: what of mixed precision ran (or why nothing did)."""
        if self.autocast_enabled:
            regions = ", ".join(f"{k} x{n}" for k, n in sorted(self.autocast_regions.items()))
            autocast = f"autocast entered enabled {self.autocast_enabled} time(s) ({regions})" if regions else \
                f"autocast entered enabled {self.autocast_enabled} time(s)"
        elif self.autocast_entered:
            where = ", ".join(f"{_rel(f)}:{a}" for f, a, _ in self.autocast_disabled_at[:2])
            autocast = f"autocast entered {self.autocast_entered} time(s), always disabled" + (f" ({where})" if where else "")
        else:
            autocast = "no autocast region entered"
        if self.scalers_enabled:
            scaler = f"GradScaler enabled, {self.scaler_skipped} of {self.scaler_steps} step(s) skipped"
        elif self.scalers_built:
            by = "torch (its device is not available)" if self.scalers_disabled_by_torch and not self.scalers_disabled_by_script else "the script (enabled=False)"
            scaler = f"GradScaler built {self.scalers_built} time(s), disabled by {by}"
        else:
            scaler = "no GradScaler built"
        reduced = []
        if self.reduced_parameters:
            reduced.append("parameters in " + ", ".join(f"{d} ({n})" for d, n in sorted(self.reduced_parameters.items())))
        elif self.reduced_casts:
            reduced.append("modules cast to " + ", ".join(sorted(self.reduced_casts)))
        if self.reduced_activations:
            reduced.append("activations in " + ", ".join(f"{d} (first from {m})" for d, m in sorted(self.reduced_activations.items())))
        low = "; ".join(reduced) if reduced else "no parameter or activation in float16 or bfloat16"
        text = f"{autocast}; {scaler}; {low}"
        return text if self.mixed_precision_ran else "mixed precision never ran: " + text

    def precision_json(self) -> dict[str, Any]:
        return {
            "ran": self.mixed_precision_ran,
            "autocast": {"entered": self.autocast_entered, "enabled": self.autocast_enabled,
                         "regions": dict(self.autocast_regions),
                         "disabled_at": [f"{_rel(f)}:{a}" for f, a, _ in self.autocast_disabled_at]},
            "grad_scaler": {"built": self.scalers_built, "enabled": self.scalers_enabled,
                            "disabled_by_script": self.scalers_disabled_by_script,
                            "disabled_by_torch": self.scalers_disabled_by_torch,
                            "steps": self.scaler_steps, "skipped": self.scaler_skipped},
            "reduced_precision": {"parameters": dict(self.reduced_parameters), "casts": dict(self.reduced_casts),
                                  "activations": dict(self.reduced_activations)},
            "summary": self.precision_summary(),
        }


def _add_counts(into: dict, more: dict) -> None:
    for k, n in more.items():
        into[k] = into.get(k, 0) + n


def _real(path: str) -> str:
    return os.path.realpath(path)


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _frames(obs: dict) -> list:
    return [[obs["file"], obs["line"], obs.get("end_line", obs["line"])], *obs.get("stack", [])]


def _covers(obs: dict, file: str, line: int, end_line: int) -> bool:
    return any(f == file and a <= end_line and line <= b for f, a, b in _frames(obs))


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


def _why(reason: str, **values: Any) -> str:
    return REASONS[reason].format(**values)


def _during(facts: RunFacts) -> str:
    if facts.steps == 0:
        return " (the run took no optimizer step: " + (facts.ended or "it ended first") + ")"
    if facts.ended.startswith(("raised", "interrupted", "terminated", "timed out", "killed")):
        return f" in the {facts.steps} step(s) before the run ended ({facts.ended})"
    return f" in the {facts.steps} step(s) taken"


def _switched_off(needs: frozenset, facts: RunFacts) -> tuple[str, dict] | None:
    """Why a probe needing `needs` ("scaler", "autocast") could not see anything, or None."""
    scaler_off = "scaler" in needs and facts.scalers_enabled == 0
    autocast_off = "autocast" in needs and facts.autocast_enabled == 0
    if not (scaler_off or autocast_off):
        return None
    if facts.scalers_built == 0:
        scaler_how = "no GradScaler was built"
    elif facts.scalers_disabled_by_torch and not facts.scalers_disabled_by_script:
        scaler_how = "torch disabled the GradScaler: its device is not available"
    else:
        scaler_how = "the GradScaler was built with enabled=False"
    where = ", ".join(f"{_rel(f)}:{a}" for f, a, _ in facts.autocast_disabled_at[:2])
    autocast_how = "no autocast region was entered" if facts.autocast_entered == 0 else (
        f"autocast was entered with enabled=False at {where}" if where else "autocast was entered disabled")
    # Either component the probe needs is off; if the other is off too, AMP as a whole was.
    scaler_off = scaler_off or (autocast_off and facts.scalers_enabled == 0)
    autocast_off = autocast_off or (scaler_off and facts.autocast_enabled == 0)
    if scaler_off and autocast_off:
        absent = facts.scalers_built == 0 and facts.autocast_entered == 0
        reason, values = ("no-amp" if absent else "amp-switched-off"), {"how": f"{scaler_how}; {autocast_how}"}
    elif scaler_off:
        reason, values = ("no-scaler" if facts.scalers_built == 0 else "scaler-disabled"), {"how": scaler_how}
    else:
        reason, values = ("autocast-not-entered" if facts.autocast_entered == 0 else "autocast-disabled"), {"where": autocast_how}
    values["hint"] = EMULATION_HINT if facts.emulated and reason != "no-amp" else ""
    return reason, values


def _raised_here(facts: RunFacts, file: str, line: int, end: int) -> dict | None:
    for r in facts.raised:
        if _covers(r, file, line, end):
            return r
    return None


def _active(needs: frozenset) -> str:
    on = " and ".join(sorted({"scaler": "loss scaling", "autocast": "autocast"}[n] for n in needs))
    return f" with {on} on" if on else ""


def correlate(diagnostics, observations: list[dict], reached: set[tuple[str, int, int]], probes: dict[str, frozenset],
              facts: RunFacts | None = None, noqa: "NoqaLookup | None" = None):
    """(findings, runtime_findings) for the static agenda and what the run recorded.

    `probes`: {code: what the probe needs to be on to see anything ("scaler", "autocast")}.
    """
    facts = facts or RunFacts()
    findings: list[Finding] = []
    used: set[int] = set()
    for d in diagnostics:
        file = _real(d.path)
        line, end = d.span.line, max(d.span.end_line, d.span.line)
        hits = [i for i, o in enumerate(observations) if o["code"] == d.code and _covers(o, file, line, end)]
        reason = "observed"
        if not hits and d.code == "AMP401":
            sym = _symbol(d.message)
            hits = [i for i, o in enumerate(observations) if o["code"] == "AMP401" and o["file"] == file and sym and f".{sym}(" in o["evidence"].get("warning", "")]
            reason = "warned"
        if hits:
            used.update(hits)
            obs = [observations[i] for i in hits]
            ev = _with_rank(obs[0]["evidence"], obs)
            where = ""
            if obs[0]["line"] != line or obs[0]["file"] != file:
                where = ev["observed_at"] = f"{_rel(obs[0]['file'])}:{obs[0]['line']}"
                reason = "observed-in-call" if reason == "observed" else reason
            findings.append(Finding(d.code, d.path, line, "confirmed", ev, d.message, reason, _why(reason, where=where)))
            continue
        # NB: per line for every code: an AMP401 in a function the run never called did not run
        # because another line of its file did (the import line is on the agenda and is tracked).
        ran = any(f == file and a <= end and line <= b for f, a, b in reached)
        findings.append(_unconfirmed(d, file, line, end, ran, probes, facts))
    runtime = _runtime_findings(observations, used, findings, noqa, facts)
    return findings, _merge_ranks(runtime)


def _unconfirmed(d, file: str, line: int, end: int, ran: bool, probes: dict, facts: RunFacts) -> Finding:
    ev: dict[str, Any] = {}
    if not ran:
        reason = "not-run" if facts.reach_mode == "lines" else "not-seen"
        why = _why(reason, during=_during(facts), mode=facts.reach_mode)
        return Finding(d.code, d.path, line, "not-reached", ev, d.message, reason, why)
    if d.code not in probes:
        return Finding(d.code, d.path, line, "no-probe", ev, d.message, "no-probe", _why("no-probe", code=d.code))
    raised = _raised_here(facts, file, line, end)
    if raised is not None:
        ev["raised"] = raised["error"]
        error = raised["error"] if len(raised["error"]) <= 100 else raised["error"][:97] + "..."
        return Finding(d.code, d.path, line, "not-confirmed", ev, d.message, "call-raised", _why("call-raised", error=error))
    off = _switched_off(probes[d.code], facts)
    if off is not None:
        reason, values = off
        why = _why(reason, **values)
        if values.get("hint"):
            why += f"; {values['hint']}"
        return Finding(d.code, d.path, line, "not-confirmed", ev, d.message, reason, why)
    return Finding(d.code, d.path, line, "not-confirmed", ev, d.message, "behaved", _why("behaved", active=_active(probes[d.code])))


class NoqaLookup:
    """`# noqa` codes per line of the files runtime findings point at (read once per file), and
    the configuration's selection per file (`selects(file, code)`, agenda.selection)."""

    def __init__(self, selects=None) -> None:
        self._maps: dict[str, dict[int, frozenset[str]]] = {}
        self._selects = selects

    def deselected(self, file: str, code: str) -> bool:
        """The configuration turns `code` off for `file` (ignore, per-file-ignores, not selected)."""
        return self._selects is not None and not self._selects(file, code)

    def suppressed(self, file: str, line: int, code: str) -> bool:
        table = self._maps.get(file)
        if table is None:
            from amplint.suppression import noqa_map

            try:
                with open(file, encoding="utf-8", errors="replace") as fh:
                    table = noqa_map(fh.read())
            except OSError:
                table = {}
            self._maps[file] = table
        from amplint.suppression import ALL

        codes = table.get(line, frozenset())
        return code in codes or ALL in codes


def _runtime_findings(observations: list[dict], used: set[int], findings: list[Finding], noqa: NoqaLookup | None,
                      facts: RunFacts | None = None) -> list[RuntimeFinding]:
    runtime: list[RuntimeFinding] = []
    confirming = {(observations[i]["code"], observations[i]["file"], observations[i]["line"]) for i in used}
    for i, o in enumerate(observations):
        if i in used:
            continue
        code = o["code"]
        if code in CONFIRMS_ONLY:
            continue
        explained = o["evidence"].get("explained_by")
        if explained and all(tuple(e) in confirming for e in explained):
            continue  # the measured consequence of static findings it confirmed (AMP903 of an AMP301 cast)
        if code not in RUNTIME_ONLY and any(
            code == f.code and f.status == "confirmed" and _covers(o, _real(f.filename), f.line, f.line) for f in findings
        ):
            continue
        ev = dict(o["evidence"])
        if o.get("rank", "main") != "main":
            ev["rank"] = o["rank"]
        ev["times_seen"] = o.get("count", 1)
        where = f"{_rel(o['file'])}:{o['line']}"
        seen = _seen(o)
        if noqa is not None and o["line"] and noqa.suppressed(o["file"], o["line"], code):
            msg = f"{code} {_short(code, o)}; suppressed by `# noqa` on that line"
            why = f"{seen}; a `# noqa` for {code} on that line accepts it, so it does not count"
            runtime.append(RuntimeFinding(code, o["file"], o["line"], msg, ev, "suppressed", "noqa", why=why))
        elif noqa is not None and noqa.deselected(o["file"], code):
            msg = f"{code} {_short(code, o)}; the configuration turns {code} off for this file"
            why = (f"{seen}; the [tool.amplint] that applies to {_rel(o['file'])} does not run {code} there "
                   f"(ignore, per-file-ignores or select), so it does not count")
            runtime.append(RuntimeFinding(code, o["file"], o["line"], msg, ev, "suppressed", "config", why=why))
        elif code in RUNTIME_ONLY:
            hint = f"to accept it here, add `# noqa: {code}` to {where}"
            runtime.append(RuntimeFinding(code, o["file"], o["line"], runtime_message(o), ev, hint=hint, why=seen))
        elif (setting := _run_setting(code, facts)) is not None:
            expr, at = setting
            msg = f"{code} found at run time; it depends on a value the script sets when it runs"
            why = (f"{seen}; whether it happens depends on `{expr}` at {at}, a value the static check "
                   f"does not evaluate, so `check` could not report it")
            hint = f"to accept it here, add `# noqa: {code}` to {where}"
            runtime.append(RuntimeFinding(code, o["file"], o["line"], msg, ev, reason="run-settings", hint=hint, why=why))
        else:
            msg = f"{code} found at run time; `check` did not report it"
            why = (f"{seen}; no value set at run time decides it (the autocast and GradScaler arguments are "
                   f"written in the source), so `check` missed it")
            hint = (f"if it is a real problem, please report the miss to amplint with this line; "
                    f"to accept it here, add `# noqa: {code}` to {where}")
            runtime.append(RuntimeFinding(code, o["file"], o["line"], msg, ev, reason="missed-by-check", hint=hint, why=why))
    return runtime


def _seen(o: dict) -> str:
    """What the probe saw, in words, for a runtime finding's `why`."""
    if o["code"] in RUNTIME_ONLY:
        return runtime_message(o)
    n = o.get("count", 1)
    return f"the {o['code']} probe saw it at this line" + (f" ({n} times)" if n > 1 else "")


# The arguments of the calls that decide whether mixed precision is on and in which dtype:
# {call name suffix: (positional indexes, keywords)}.
_DECIDING = {
    "autocast": ((0, 1), ("device_type", "dtype", "enabled")),
    "GradScaler": ((0, 1), ("device", "enabled", "init_scale")),
}


def _run_setting(code: str, facts: RunFacts | None) -> tuple[str, str] | None:
    """(expression, "file:line") of the first autocast or GradScaler call of this run whose
    precision-deciding argument is not written in the source (`dtype=args.dtype`, `enabled=amp`),
    for a code whose problem depends on them (AMP1xx: the scaler; AMP2xx: autocast and the
    scaler), else None: the finding then came from the source alone, and its miss is real."""
    if facts is None or not code.startswith(("AMP1", "AMP2")):
        return None
    sites = list(facts.scalers_enabled_at)
    if code.startswith("AMP2"):
        sites = list(facts.autocast_enabled_at) + sites
    for file, line, _end in sites:
        expr = _dynamic_argument(file, line)
        if expr is not None:
            return expr, f"{_rel(file)}:{line}"
    return None


_TREES: dict[str, Any] = {}


def _dynamic_argument(file: str, line: int) -> str | None:
    import ast

    if file not in _TREES:
        try:
            with open(file, encoding="utf-8", errors="replace") as fh:
                _TREES[file] = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            _TREES[file] = None
    tree = _TREES[file]
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        name = ast.unparse(node.func).rsplit(".", 1)[-1]
        if name not in _DECIDING:
            continue
        positions, keywords = _DECIDING[name]
        values = [a for i, a in enumerate(node.args) if i in positions]
        values += [k.value for k in node.keywords if k.arg in keywords]
        for v in values:
            if not _literal(v):
                return ast.unparse(v)
    return None


def _literal(node) -> bool:
    """A value written in the source: a constant, or a dotted name of torch's (`torch.float16`)."""
    import ast

    if isinstance(node, ast.Constant):
        return True
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "torch"


def _short(code: str, o: dict) -> str:
    return runtime_message(o) if code in RUNTIME_ONLY else "found at run time"


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
        where = f"`{ev['module']}`" if ev.get("module") else "outside any module"
        what = "gradient" if ev.get("pass") == "backward" else "forward output"
        node = f" in {ev['node']}" if ev.get("node") else ""
        cause = f": {ev['cause']}" if ev.get("cause") else ""
        return f"first non-finite {what}: {where}{node} ({ev.get('dtype')}) at step {ev.get('step')}{cause}"
    if o["code"] == "AMP902":
        return f"{ev.get('summary', 'GradScaler skipped steps')} (min scale {ev.get('min_scale')})"
    if o["code"] == "AMP904":
        return ev.get("summary", "a schedule advanced on a step GradScaler skipped")
    if o["code"] == "AMP905":
        return ev.get("summary", "activations within 10x of float16's largest value")
    if o["code"] == "AMP903":
        share = ev.get("lost_update_share") or 0.0
        return f"{share:.0%} of updates lost in {'/'.join(ev.get('param_dtypes', []))} weights ({ev.get('optimizer')})"
    return o["code"]
