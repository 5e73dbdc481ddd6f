"""verify --profile: the profiler window, the trace summary read from the trace JSON, torch-tb-profiler's loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from amplint.runtime import profiling, trace_summary  # noqa: E402

from ._inprocess import SCRIPTS, run_script  # noqa: E402


def test_window_shrinks_to_fit_a_short_step_budget():
    assert profiling.window(None) == (1, 1, 3)
    assert profiling.window(100) == (1, 1, 3)
    assert profiling.window(4) == (0, 1, 3)
    assert profiling.window(3) == (0, 0, 3)
    assert profiling.window(1) == (0, 0, 1)
    assert profiling.window(10, "2,2,4") == (2, 2, 4)


def test_verify_env_names_the_extension_and_the_directory(tmp_path):
    env = profiling.verify_env(tmp_path / "p")
    assert env["AMPLINT_EXTENSIONS"].split(",")[-1] == "amplint.runtime.profiling:install"
    assert env["AMPLINT_PROFILE_DIR"] == str((tmp_path / "p").resolve())


def _profile(tmp: Path, script: str, mode: str = "as_written") -> dict:
    prof = profiling.StepProfiler(tmp, (1, 1, 3)).start()
    run_script(script, mode=mode, steps=6, extra=[prof])
    traces = trace_summary.find_traces(tmp)
    assert len(traces) == 1, traces
    return trace_summary.summarize(trace_summary.load_trace(traces[0]), source=str(traces[0]))


@pytest.fixture(scope="module")
def fp16_trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prof_fp16")
    return tmp, _profile(tmp, "amp_correct")


def test_summary_of_an_fp16_autocast_run(fp16_trace):
    _, s = fp16_trace
    assert s["steps"]["count"] == 3 and s["steps"]["mean_ms"] > 0
    mm = s["families"]["matmul"]
    # two Linear layers: 2 forward addmm + 3 backward mm per step, all with fp16 inputs under autocast
    assert mm["count"] == 15 and set(mm["by_dtype"]) == {"fp16"}
    assert mm["ops"] == {"aten::addmm": 6, "aten::mm": 9}
    assert s["reduced_precision"]["count_share"] == 1.0
    # autocast's casts of weights and inputs to fp16 (and of the output back via .float())
    conv = s["casts"]["by_conversion"]
    assert conv["fp32->fp16"]["count"] >= 3 * 3 and conv["fp16->fp32"]["count"] >= 3
    assert s["casts"]["precision_casts"]["count"] > 0
    assert s["grad_scaler"]["ops"] == {
        "aten::_amp_foreach_non_finite_check_and_unscale_": 3, "aten::_amp_update_scale_": 3
    }
    assert s["peak_memory_bytes"]["cpu"] > 0


def test_summary_follows_the_precision_actually_used(tmp_path):
    s = _profile(tmp_path / "fp32", "amp_correct", mode="fp32")
    assert set(s["families"]["matmul"]["by_dtype"]) == {"fp32"}
    assert s["grad_scaler"]["count"] == 0  # a disabled scaler launches nothing
    assert s["casts"]["precision_casts"]["count"] == 0
    s = _profile(tmp_path / "bf16", "amp_correct", mode="bf16")
    assert set(s["families"]["matmul"]["by_dtype"]) == {"bf16"}


def test_innermost_op_carries_the_autocast_dtype():
    # aten::linear is recorded before autocast casts its inputs; aten::addmm after
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Input type": ["float", "float", "float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_to_copy", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"Input type": ["float", "Scalar"], "Concrete Inputs": ["", "15"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 3, "dur": 6,
         "args": {"Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]}},
        # a second thread (autograd's backward thread on GPU): nesting is per thread
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 4, "dur": 2,
         "args": {"Input type": ["c10::Half", "c10::Half"]}},
    ]
    s = trace_summary.summarize({"traceEvents": ev})
    mm = s["families"]["matmul"]
    assert mm["ops"] == {"aten::addmm": 1, "aten::mm": 1}
    assert mm["by_dtype"]["bf16"]["time_us"] == 6 and mm["by_dtype"]["fp16"]["count"] == 1
    assert s["casts"]["by_conversion"] == {"fp32->bf16": {"count": 1, "time_us": 1.0}}


def test_gpu_kernel_time_is_attributed_through_external_ids():
    # the shape of a CUDA trace: kernels carry the "External id" of the host op that launched them
    def op(name, ts, dur, ext, types):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"External id": ext, "Input type": types}}

    ev = [
        op("aten::linear", 0, 20, 1, ["float", "float"]),
        op("aten::_to_copy", 1, 2, 2, ["float", "Scalar"]),
        op("aten::addmm", 5, 10, 3, ["c10::Half", "c10::Half", "c10::Half"]),
        op("aten::scaled_dot_product_attention", 30, 20, 4, ["c10::Half"] * 3),
        op("aten::bmm", 32, 5, 5, ["float", "float"]),  # the math fallback's own matmul
        {"ph": "X", "cat": "kernel", "name": "nvjet_hsh_192x192", "pid": 0, "tid": 7, "ts": 6, "dur": 4,
         "args": {"External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "unrolled_elementwise_kernel", "pid": 0, "tid": 7, "ts": 2, "dur": 1,
         "args": {"External id": 2}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 33, "dur": 3,
         "args": {"External id": 5}},
    ]
    s = trace_summary.summarize({"traceEvents": ev})
    assert s["families"]["matmul"]["ops"] == {"aten::addmm": 1}
    assert s["gpu"] == {"kernel_time_us": 8.0, "by_family": {"matmul": {"fp16": 4.0}, "attention": {"fp16": 3.0}}}


TB_LOAD = textwrap.dedent(
    """
    import json, sys
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader
    if __name__ == "__main__":
        run = RunLoader("amplint", sys.argv[1], io.Cache()).load()
        out = []
        for p in run.get_profiles():
            steps = [row[0] for row in p.overview["steps"]["rows"]] if getattr(p, "overview", None) else []
            table = getattr(p, "operation_table_by_name", None) or {}
            ops = [row["name"] for row in table.get("data", [])]
            out.append({"worker": p.worker, "views": [v.display_name for v in p.views], "steps": steps, "ops": ops})
        print(json.dumps(out))
    """
)


def test_trace_loads_in_torch_tb_profiler(fp16_trace, tmp_path):
    pytest.importorskip(
        "torch_tb_profiler",
        reason="torch-tb-profiler (legacy TensorBoard plugin, in the `test` extra) is not installed",
    )
    directory, summary = fp16_trace
    script = tmp_path / "tb_load.py"
    script.write_text(TB_LOAD)
    # NB: its loader parses each file in a child process; fork avoids re-importing this test run.
    env = dict(os.environ, TORCH_PROFILER_START_METHOD="fork")
    proc = subprocess.run([sys.executable, str(script), str(directory)], capture_output=True, text=True,
                          env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    profiles = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(profiles) == 1, proc.stderr[-2000:]  # a parse failure leaves no profile
    p = profiles[0]
    assert {"Overview", "Operator", "Trace", "Memory"} <= set(p["views"])
    # the same ProfilerStep ranges.  On a CUDA trace torch also writes each ProfilerStep#N on the
    # GPU's track (gpu_user_annotation) and the plugin lists it twice: ['2', '2', '3', '3', ...] on
    # an H200, where our summary rightly counts the host ranges once.
    assert len(set(p["steps"])) == summary["steps"]["count"]
    assert {"aten::addmm", "aten::mm", "aten::_to_copy"} <= set(p["ops"])


def test_verify_profile_writes_a_trace_and_reports_its_summary(tmp_path, capsys):
    from amplint.runtime.cli import verify

    report, prof = tmp_path / "report.json", tmp_path / "prof"
    code = verify(["--no-progress", "--steps", "5", "--device", "cpu", "--profile", str(prof),
                   "--report", str(report), "--", sys.executable, str(SCRIPTS / "amp_correct.py")])
    data = json.loads(report.read_text())
    assert code == 0, data
    assert len(trace_summary.find_traces(prof)) == 1
    (s,) = data["profile"]
    assert s["steps"]["count"] == 3
    assert set(s["families"]["matmul"]["by_dtype"]) == {"fp16"}  # CPU emulation of fp16 autocast
    assert s["grad_scaler"]["count"] == 6
    assert "mean step time" in capsys.readouterr().out


def _bad_traces(tmp: Path) -> list[tuple[Path, str]]:
    """(path, what the error says) for each way a trace cannot be read."""
    import gzip

    good = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1}] * 20})
    (tmp / "cut.pt.trace.json").write_text(good[: len(good) // 2])
    (tmp / "cut.pt.trace.json.gz").write_bytes(gzip.compress(good.encode())[:40])
    (tmp / "not_json.pt.trace.json").write_text("\x00garbage")
    (tmp / "shape.pt.trace.json").write_text('{"traceEvents": 5}')
    (tmp / "events.pt.trace.json").write_text("[1, 2]")
    # events of shapes no profiler writes, and JSON nested deeper than the parser goes (hostile pass 14)
    mm = {"ph": "X", "name": "aten::mm", "ts": 1, "dur": 10, "args": {"Input type": ["c10::Half", "c10::Half"]}}
    memory = {"ph": "i", "name": "[memory]", "ts": 2, "args": {"Device Type": 0, "Total Allocated": "NaN"}}
    step = {"ph": "X", "name": "ProfilerStep#2", "ts": 0, "dur": 100, "args": {}}
    base = [step, mm, dict(memory, args={"Device Type": 0, "Total Allocated": 1024})]
    (tmp / "args_list.pt.trace.json").write_text(json.dumps({"traceEvents": [dict(e, args=["x"]) for e in base]}))
    (tmp / "args_null.pt.trace.json").write_text(json.dumps({"traceEvents": [dict(e, args=None) for e in base]}))
    (tmp / "memory_nan.pt.trace.json").write_text(json.dumps({"traceEvents": [mm, memory]}))
    (tmp / "deep.pt.trace.json").write_text('{"traceEvents": [{"args": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    return [
        (tmp / "args_list.pt.trace.json", "an event of an unexpected shape"),
        (tmp / "args_null.pt.trace.json", "an event of an unexpected shape"),
        (tmp / "memory_nan.pt.trace.json", "an event of an unexpected shape"),
        (tmp / "deep.pt.trace.json", "nests too deeply"),
        (tmp / "missing_dir", "no such file or directory"),
        (tmp / "cut.pt.trace.json", "truncated"),
        (tmp / "cut.pt.trace.json.gz", "not a readable trace"),
        (tmp / "not_json.pt.trace.json", "invalid JSON at line 1"),
        (tmp / "shape.pt.trace.json", "not a Chrome trace"),
        (tmp / "events.pt.trace.json", "not a Chrome trace"),
    ]


def test_trace_summary_cli_names_a_missing_or_unreadable_trace_and_exits_2(tmp_path, capsys):
    for path, says in _bad_traces(tmp_path):
        assert trace_summary.main([str(path)]) == 2, path
        err = capsys.readouterr().err
        assert err.startswith(f"amplint trace_summary: error: {path}: ") and says in err, err
        assert "Traceback" not in err
    assert trace_summary.main([str(tmp_path)]) == 2  # a folder holding them: the first one's error
    assert "args_list.pt.trace.json" in capsys.readouterr().err


def test_verify_keeps_an_unreadable_trace_as_an_error_in_its_summary(tmp_path):
    """verify summarises after a run that may have been ended mid-write: the run's report is
    not lost to one bad trace file."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.pt.trace.json").write_text('{"traceEvents": [')
    (summary,) = trace_summary.summarize_dir(tmp_path / "t", unreadable_ok=True)
    assert "truncated" in summary["error"]
    assert trace_summary.render(summary) == f"profile: {summary['error']}"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_trace_summary_help_prints_the_usage_and_exits_0(flag, capsys):
    """It answered "--help: no such file or directory", exit 2 (hostile pass 16)."""
    assert trace_summary.main([flag]) == 0
    assert "usage: python -m amplint.runtime.trace_summary" in capsys.readouterr().out


def test_trace_summary_on_a_full_disk_is_one_error_line_and_exit_2(tmp_path):
    """`trace_summary prof > /dev/full` printed an OSError traceback with exit 1."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    trace = tmp_path / "t.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 10, "args": {}}]}))
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "amplint.runtime.trace_summary", str(trace)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "cannot write the output" in proc.stderr
