"""What ran in reduced precision and where the time went, computed from a torch.profiler trace JSON.

Reads the Chrome-trace JSON that `tensorboard_trace_handler` writes (`*.pt.trace.json[.gz]`) and
needs nothing but the standard library, so a trace from another machine (a GPU box) can be
summarised anywhere.

- **Matmul / conv / attention by input dtype.** The evidence is the op's recorded `"Input type"`
  (`record_shapes=True`), never a Tensor Core heuristic: TF32 fp32 matmuls also use Tensor Cores and
  torch-tb-profiler's kernel-name list does not know Hopper's `nvjet` kernels. An op is counted at
  the innermost level of its family (`aten::linear` -> `aten::addmm`, `aten::conv2d` -> ... ->
  `aten::mkldnn_convolution`), because the outer op is recorded *before* autocast casts its inputs
  and would show fp32. Matmuls inside an attention op (the math fallback of SDPA) belong to the
  attention op, so no time is counted twice.
- **Casts.** `aten::_to_copy` events (autocast's casts, and explicit `.to()`/`.half()` calls, which
  look the same in a trace) with the conversion read from the op's dtype argument.
- **GradScaler kernels**: `_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_`.
- **Peak memory** per device from the `[memory]` events (`profile_memory=True`).
- **Step time** from the `ProfilerStep#N` ranges the schedule writes.

Times are op durations on the host in microseconds; when the trace has GPU kernels, `gpu` gives the
kernel time attributed to the same op families through the kernels' `External id`.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from amplint.closed_output import is_write_failure, quiet_stdout

TRACE_GLOB = ("*.pt.trace.json", "*.pt.trace.json.gz")

# "Input type" strings as the profiler writes them -> short dtype names
DTYPES = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8_e4m3fn", "c10::Float8_e5m2": "fp8_e5m2",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz", "c10::Float8_e5m2fnuz": "fp8_e5m2fnuz",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
    "unsigned char": "uint8", "bool": "bool",
}
FLOATING = {"fp32", "fp64", "fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz"}
REDUCED = {"fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz"}
# c10::ScalarType codes, as `aten::_to_copy` records its `dtype` argument in "Concrete Inputs"
SCALAR_TYPES = {"0": "uint8", "1": "int8", "2": "int16", "3": "int32", "4": "int64", "5": "fp16",
                "6": "fp32", "7": "fp64", "11": "bool", "15": "bf16", "23": "fp8_e5m2", "24": "fp8_e4m3fn"}

MATMUL_OPS = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation",
    "aten::matmul", "aten::linear", "aten::mv", "aten::addmv", "aten::dot", "aten::vdot",
    "aten::_scaled_mm", "aten::_int_mm", "aten::addr", "aten::outer",
}
GRAD_SCALER_OPS = ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_")
FAMILIES = ("matmul", "conv", "attention")


def family(name: str) -> str | None:
    """matmul / conv / attention for an aten op name, else None."""
    if not name.startswith("aten::"):
        return None
    if "attention" in name:
        return "attention"
    if name in MATMUL_OPS:
        return "matmul"
    if "conv" in name and "convert" not in name:
        return "conv"
    return None


def input_dtype(args: dict[str, Any]) -> str:
    """The compute dtype of an op: its first floating tensor input ("unknown" without shapes)."""
    types = args.get("Input type")
    if not isinstance(types, list):
        return "unknown"
    names = [DTYPES.get(t) for t in types if isinstance(t, str)]
    for n in names:
        if n in FLOATING:
            return n
    return next((n for n in names if n), "unknown")


class TraceError(Exception):
    """A trace that cannot be read: missing, truncated (a run killed while writing it), not JSON,
    or JSON that is not a Chrome trace.  The message names the file."""


def load_trace(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            trace = json.load(fh)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file or directory") from None
    except json.JSONDecodeError as exc:
        ends_early = exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string")
        cut = " (truncated: the run may have been ended while writing it)" if ends_early else ""
        raise TraceError(f"{path}: not a readable trace: invalid JSON at line {exc.lineno} column {exc.colno}{cut}") from None
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:  # gzip.BadGzipFile is an OSError
        raise TraceError(f"{path}: not a readable trace: {exc}") from None
    except RecursionError:
        raise TraceError(f"{path}: not a readable trace: its JSON nests too deeply") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceError(f"{path}: not a Chrome trace (no list of events under \"traceEvents\")")
    return trace


def _nest(events: list[dict[str, Any]]) -> list[int | None]:
    """Parent index of every complete event, by time containment on its own (pid, tid)."""
    parent: list[int | None] = [None] * len(events)
    by_thread: dict[tuple, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[(e.get("pid"), e.get("tid"))].append(i)
    for idxs in by_thread.values():
        # outer events first when they start together
        idxs.sort(key=lambda i: (float(events[i]["ts"]), -float(events[i].get("dur", 0))))
        stack: list[int] = []
        for i in idxs:
            start = float(events[i]["ts"])
            while stack:
                top = events[stack[-1]]
                if float(top["ts"]) + float(top.get("dur", 0)) >= start + float(events[i].get("dur", 0)) - 1e-3:
                    break
                stack.pop()
            parent[i] = stack[-1] if stack else None
            stack.append(i)
    return parent


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def summarize(trace: dict[str, Any], *, source: str | None = None) -> dict[str, Any]:
    """The summary of one trace (see the module docstring); JSON-ready."""
    raw = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    kinds = ("cpu_op", "user_annotation", "kernel", "gpu_user_annotation")
    ops = [e for e in raw if e.get("ph") == "X" and e.get("cat") in kinds]
    host = [e for e in ops if e.get("cat") in ("cpu_op", "user_annotation")]
    parent = _nest(host)
    fam = [family(e["name"]) if e.get("cat") == "cpu_op" else None for e in host]

    # innermost member of each family; matmuls under an attention op belong to it
    has_same_below = [False] * len(host)
    under_attention = [False] * len(host)
    for i in range(len(host)):
        p = parent[i]
        while p is not None:
            if fam[i] and fam[p] == fam[i]:
                has_same_below[p] = True
            if fam[p] == "attention" and fam[i] != "attention":
                under_attention[i] = True
            p = parent[p]
    counted = [bool(f) and not has_same_below[i] and not (f == "matmul" and under_attention[i])
               for i, f in enumerate(fam)]

    families: dict[str, Any] = {}
    for name in FAMILIES:
        members = [i for i in range(len(host)) if counted[i] and fam[i] == name]
        by_dtype: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "time_us": 0.0})
        for i in members:
            d = by_dtype[input_dtype(host[i].get("args", {}))]
            d["count"] += 1
            d["time_us"] += float(host[i].get("dur", 0))
        total_n = sum(d["count"] for d in by_dtype.values())
        total_t = sum(d["time_us"] for d in by_dtype.values())
        families[name] = {
            "count": total_n,
            "time_us": round(total_t, 3),
            "by_dtype": {k: {"count": v["count"], "time_us": round(v["time_us"], 3),
                             "count_share": _share(v["count"], total_n), "time_share": _share(v["time_us"], total_t)}
                         for k, v in sorted(by_dtype.items(), key=lambda kv: -kv[1]["time_us"])},
            "ops": dict(sorted(_count_names(host[i]["name"] for i in members).items())),
        }
    all_n = sum(f["count"] for f in families.values())
    all_t = sum(f["time_us"] for f in families.values())
    red_n = sum(d["count"] for f in families.values() for k, d in f["by_dtype"].items() if k in REDUCED)
    red_t = sum(d["time_us"] for f in families.values() for k, d in f["by_dtype"].items() if k in REDUCED)

    steps = [e for e in host if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    step_us = [float(e.get("dur", 0)) for e in steps]
    step_total = sum(step_us)

    casts = [e for e in host if e["name"] == "aten::_to_copy"]
    conversions: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "time_us": 0.0})
    for e in casts:
        args = e.get("args", {})
        concrete = args.get("Concrete Inputs") or []
        dst = SCALAR_TYPES.get(concrete[1], "?") if len(concrete) > 1 and concrete[1] else "same"
        key = f"{input_dtype(args)}->{dst}"
        conversions[key]["count"] += 1
        conversions[key]["time_us"] += float(e.get("dur", 0))
    precision_casts = {k: v for k, v in conversions.items()
                       if set(k.split("->")) & REDUCED and set(k.split("->")) & {"fp32", "fp64"}}
    cast_t = sum(float(e.get("dur", 0)) for e in casts)

    scaler = [e for e in host if e.get("cat") == "cpu_op" and any(k in e["name"] for k in GRAD_SCALER_OPS)]
    scaler_t = sum(float(e.get("dur", 0)) for e in scaler)

    peaks: dict[str, int] = {}
    for e in raw:
        if e.get("ph") == "i" and e.get("name") == "[memory]":
            args = e.get("args", {})
            dev = "cpu" if args.get("Device Type", 0) == 0 else f"cuda:{args.get('Device Id', 0)}"
            peaks[dev] = max(peaks.get(dev, 0), int(args.get("Total Allocated", 0)))

    summary: dict[str, Any] = {
        "trace": source,
        "steps": {"count": len(steps), "mean_ms": round(step_total / len(steps) / 1e3, 3) if steps else None,
                  "durations_ms": [round(t / 1e3, 3) for t in step_us]},
        "families": families,
        "reduced_precision": {"count_share": _share(red_n, all_n), "time_share": _share(red_t, all_t),
                              "count": red_n, "of": all_n},
        "casts": {"op": "aten::_to_copy", "count": len(casts), "time_us": round(cast_t, 3),
                  "share_of_step_time": _share(cast_t, step_total),
                  "precision_casts": {"count": sum(int(v["count"]) for v in precision_casts.values()),
                                      "time_us": round(sum(v["time_us"] for v in precision_casts.values()), 3)},
                  "by_conversion": {k: {"count": v["count"], "time_us": round(v["time_us"], 3)}
                                    for k, v in sorted(conversions.items(), key=lambda kv: -kv[1]["time_us"])}},
        "grad_scaler": {"count": len(scaler), "time_us": round(scaler_t, 3),
                        "share_of_step_time": _share(scaler_t, step_total),
                        "ops": _count_names(e["name"] for e in scaler)},
        "peak_memory_bytes": peaks,
    }
    kernels = [e for e in ops if e.get("cat") == "kernel"]
    if kernels:
        summary["gpu"] = _gpu(kernels, host, parent, fam, counted)
    return summary


def _count_names(names: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for n in names:
        out[n] += 1
    return dict(out)


def _gpu(kernels, host, parent, fam, counted) -> dict[str, Any]:
    """Kernel time per op family and input dtype, through the kernels' `External id`."""
    by_ext = {e.get("args", {}).get("External id"): i for i, e in enumerate(host) if e.get("cat") == "cpu_op"}
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    total = 0.0
    for k in kernels:
        dur = float(k.get("dur", 0))
        total += dur
        i = by_ext.get(k.get("args", {}).get("External id"))
        while i is not None and not counted[i]:
            i = parent[i]
        if i is None:
            continue
        out[fam[i]][input_dtype(host[i].get("args", {}))] += dur
    return {"kernel_time_us": round(total, 3),
            "by_family": {f: {d: round(t, 3) for d, t in v.items()} for f, v in out.items()}}


def find_traces(directory: str | Path) -> list[Path]:
    d = Path(directory)
    return sorted({p for pattern in TRACE_GLOB for p in d.rglob(pattern)})


def summarize_dir(directory: str | Path, *, unreadable_ok: bool = False) -> list[dict[str, Any]]:
    """One summary per trace file under `directory` (newest last).

    A trace that cannot be read raises TraceError, or with `unreadable_ok` (verify, after a run
    that may have been ended mid-write) becomes `{"trace": path, "error": why}`."""
    out = []
    for p in find_traces(directory):
        try:
            out.append(summarize_file(p))
        except TraceError as exc:
            if not unreadable_ok:
                raise
            out.append({"trace": str(p), "error": str(exc)})
    return out


def summarize_file(path: str | Path) -> dict[str, Any]:
    """`summarize(load_trace(path))`, with an event of a shape no profiler writes (`args` a
    list or null, a memory figure that is not a number) a TraceError naming the file, like an
    unreadable one, instead of a traceback."""
    trace = load_trace(path)
    try:
        return summarize(trace, source=str(path))
    except (TypeError, KeyError, AttributeError, ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: not a Chrome trace: an event of an unexpected shape ({type(exc).__name__})") from None


def render(summary: dict[str, Any]) -> str:
    """A few lines for a terminal."""
    if "error" in summary:
        return f"profile: {summary['error']}"
    lines = [f"profile: {summary.get('trace')}"]
    st = summary["steps"]
    if st["count"]:
        lines.append(f"  steps profiled: {st['count']}, mean step time {st['mean_ms']:.3f} ms")
    for name, f in summary["families"].items():
        if not f["count"]:
            continue
        parts = ", ".join(f"{k} {v['count']} ops / {100 * (v['time_share'] or 0):.0f}% time"
                          for k, v in f["by_dtype"].items())
        lines.append(f"  {name}: {f['count']} ops, {f['time_us'] / 1e3:.3f} ms: {parts}")
    rp = summary["reduced_precision"]
    if rp["of"]:
        lines.append(f"  reduced precision (fp16/bf16/fp8) matmul/conv/attention: {rp['count']}/{rp['of']} ops, "
                     f"{100 * (rp['time_share'] or 0):.0f}% of their time")
    c = summary["casts"]
    share = f", {100 * c['share_of_step_time']:.1f}% of step time" if c["share_of_step_time"] is not None else ""
    lines.append(f"  casts (aten::_to_copy): {c['count']} ops, {c['time_us'] / 1e3:.3f} ms{share}; "
                 f"fp32<->fp16/bf16: {c['precision_casts']['count']}")
    g = summary["grad_scaler"]
    if g["count"]:
        lines.append(f"  GradScaler kernels: {g['count']} ops, {g['time_us'] / 1e3:.3f} ms")
    for dev, peak in summary["peak_memory_bytes"].items():
        lines.append(f"  peak memory {dev}: {peak / 2**20:.2f} MiB")
    return "\n".join(lines)


_USAGE = "usage: python -m amplint.runtime.trace_summary DIR_OR_TRACE... [--json]"
_HELP = _USAGE + """

Summarize torch.profiler Chrome traces (`*.pt.trace.json[.gz]`, as `amplint verify --profile`
writes them): kernels by dtype, the share of half-precision time, peak memory.

  --json   print the summaries as JSON
  exit 0: summaries printed; 1: no traces found; 2: a missing, unreadable or malformed trace"""


def main(argv: list[str] | None = None) -> int:
    """`python -m amplint.runtime.trace_summary DIR_OR_TRACE [--json]`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except BrokenPipeError:
        quiet_stdout()  # `... | head`: the reader left
        return 0
    except OSError as exc:
        if not is_write_failure(exc):
            raise
        print(f"amplint trace_summary: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        quiet_stdout()
        return 2


def _main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(_HELP)
        sys.stdout.flush()
        return 0
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if not paths:
        print(_USAGE, file=sys.stderr)
        return 2
    summaries = []
    try:
        for p in map(Path, paths):
            summaries += summarize_dir(p) if p.is_dir() else [summarize_file(p)]
    except TraceError as exc:
        print(f"amplint trace_summary: error: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(summaries, indent=2))
    else:
        print("\n".join(render(s) for s in summaries) or "no traces found")
    sys.stdout.flush()  # NB: `> /dev/full` fails here, inside the handler, not at interpreter exit
    return 0 if summaries else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
