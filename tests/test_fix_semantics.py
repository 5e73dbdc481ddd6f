"""A safe fix builds the same objects from the same arguments (issue 17, item 2).

Each fixture that a *safe* fix changes is run twice with torch, as written and as fixed,
while every construction of a GradScaler or an autocast context and every application of
`custom_fwd` / `custom_bwd` is recorded with the arguments its implementation actually
receives (bound to its signature, defaults filled in, autocast's `None` defaults resolved
the way autocast resolves them).  Both runs must record the same constructions and print
the same output (the fixtures print `isinstance` answers and the like).  The deprecated
classes are thin subclasses that forward to these implementations, so "the same
arguments" means the same scaler, context or wrapped function.

Runs on the CPU in-process (a CUDA scaler or autocast on a machine without CUDA is
built, warned about and disabled; its arguments are still recorded); a few seconds.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import runpy
import warnings
from pathlib import Path

import pytest

from amplint.engine import check_source
from amplint.fixes import fix_text
from amplint.testing import fixture_cases, fixture_config

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parent.parent


def _safely_fixed(path: Path) -> str:
    source = path.read_text(encoding="utf-8")
    config = fixture_config(path, source)
    return fix_text(source, lambda text: check_source(text, str(path), config), unsafe=False).source


CASES = [p for p in fixture_cases(ROOT / "fixtures") if _safely_fixed(p) != p.read_text(encoding="utf-8")]


class Recorder:
    """Patches the implementations the deprecated and the modern spellings share."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @contextlib.contextmanager
    def installed(self):
        from torch.amp import autocast_mode, grad_scaler

        scaler_init = grad_scaler.GradScaler.__init__
        autocast_init = autocast_mode.autocast.__init__
        fwd, bwd = autocast_mode.custom_fwd, autocast_mode.custom_bwd
        record = self.calls.append

        def scaler(self_, *args, **kwargs):
            record(("GradScaler", _bound(scaler_init, self_, *args, **kwargs)))
            return scaler_init(self_, *args, **kwargs)

        def autocast(self_, *args, **kwargs):
            bound = _bound(autocast_init, self_, *args, **kwargs)
            if bound["dtype"] is None:  # what autocast itself does with its defaults
                bound["dtype"] = torch.get_autocast_dtype(bound["device_type"])
            if bound["cache_enabled"] is None:
                bound["cache_enabled"] = torch.is_autocast_cache_enabled()
            record(("autocast", bound))
            return autocast_init(self_, *args, **kwargs)

        def decorator(original, name, function_parameter):
            @functools.wraps(original)
            def wrapper(*args, **kwargs):
                bound = _bound(original, *args, **kwargs)
                if bound[function_parameter] is not None:  # the application, not the partial
                    bound[function_parameter] = bound[function_parameter].__qualname__
                    record((name, bound))
                return original(*args, **kwargs)

            return wrapper

        patches = [
            (grad_scaler.GradScaler, "__init__", scaler),
            (autocast_mode.autocast, "__init__", autocast),
            (autocast_mode, "custom_fwd", decorator(fwd, "custom_fwd", "fwd")),
            (autocast_mode, "custom_bwd", decorator(bwd, "custom_bwd", "bwd")),
            (torch.amp, "custom_fwd", None),
            (torch.amp, "custom_bwd", None),
        ]
        saved = []
        try:
            for owner, attr, new in patches:
                saved.append((owner, attr, getattr(owner, attr)))
                setattr(owner, attr, new if new is not None else getattr(autocast_mode, attr))
            yield self
        finally:
            for owner, attr, old in reversed(saved):
                setattr(owner, attr, old)


def _bound(function, *args, **kwargs) -> dict:
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def run_script(path: Path) -> tuple[list[tuple], str]:
    """(constructions recorded, stdout) of running `path` as a script."""
    recorder = Recorder()
    out = io.StringIO()
    torch.manual_seed(0)
    with recorder.installed(), contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation and "CUDA is not available" warnings
        runpy.run_path(str(path), run_name="__main__")
    return recorder.calls, out.getvalue()


def test_the_safe_fixes_of_the_fixtures_are_exercised() -> None:
    """The fixtures whose safe fixes this file runs (a rename would empty the list). AMP401's
    fixes of module-level imports and of GradScaler constructions are unsafe (the fix-safety
    harness runs them): `bad_imported_names.py` has only those."""
    names = {p.name for p in CASES}
    assert {"bad_torch_alias_th.py", "bad_custom_fwd_bwd.py"} <= names, sorted(names)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_safe_fix_builds_the_same_objects(path: Path, tmp_path: Path) -> None:
    fixed = tmp_path / path.name
    fixed.write_text(_safely_fixed(path), encoding="utf-8")
    before, printed_before = run_script(path)
    after, printed_after = run_script(fixed)
    assert before, "the fixture builds nothing this test can compare"
    assert after == before
    assert printed_after == printed_before


def test_the_recorder_sees_a_wrong_device() -> None:
    """The comparison can fail: the old fix of `Scaler = torch.cuda.amp.GradScaler; Scaler(4.0)`."""
    recorder = Recorder()
    with recorder.installed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = torch.cuda.amp.GradScaler
        old(4.0)
        with contextlib.suppress(Exception):
            torch.amp.GradScaler(4.0)
    (_, legacy), (_, rewritten) = recorder.calls
    assert legacy["device"] == "cuda" and legacy["init_scale"] == 4.0
    assert rewritten["device"] == 4.0 and legacy != rewritten
