"""AMP110 probe: the state_dict of an object that built a GradScaler holds no scaler state."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Mapping

from amplint.runtime import torch_state
from amplint.runtime.attribution import Site, is_user_file
from amplint.runtime.patching import wrap
from amplint.runtime.probes._base import Probe

_METHODS = ("state_dict", "load_state_dict")


def _holds_scaler_state(obj, depth: int = 0) -> bool:
    """A GradScaler, or its state dict (`scale`, `_growth_tracker`), somewhere in `obj`."""
    if depth > 4:
        return False
    if isinstance(obj, torch_state.BaseGradScaler):
        return True
    if isinstance(obj, Mapping):
        keys = set(obj.keys()) if len(obj) < 10_000 else set()
        if {"scale", "_growth_tracker"} <= keys:
            return True
        return any(_holds_scaler_state(v, depth + 1) for v in list(obj.values())[:200])
    if isinstance(obj, (list, tuple)):
        return any(_holds_scaler_state(v, depth + 1) for v in obj[:200])
    return False


def _builder() -> object | None:
    """The `self` of the innermost user frame: the object whose method built the scaler."""
    frame = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None or frame.f_code.co_argcount == 0:
        return None
    owner = frame.f_locals.get(frame.f_code.co_varnames[0])
    if owner is None or type(owner).__module__.split(".")[0] == "torch":
        return None
    return owner


def _line_of(obj, keyword: str) -> Site | None:
    """Where the `def` (or `class`) statement of a function (or class) is, decorators skipped."""
    try:
        lines, first = inspect.getsourcelines(obj)
        path = inspect.getsourcefile(obj)
    except (OSError, TypeError):
        return None
    for offset, text in enumerate(lines):
        stripped = text.lstrip()
        if stripped.startswith((f"{keyword} ", f"async {keyword} ")):
            return Site(path, first + offset, first + offset)
    return Site(path, first, first)


class ScalerStateNotInStateDictProbe(Probe):
    """When a user object builds a GradScaler in one of its methods (its `self` is the builder),
    the `state_dict` / `load_state_dict` its class has (defined there or inherited from a user
    base) is watched while the object's scaler is enabled: a `state_dict()` result with no scaler
    state confirms once it is saved in a payload that holds no scaler state either (or is never
    saved); a `load_state_dict()` that restores no GradScaler confirms at once.  Recorded at the
    method's `def`, or at the class line when the method is inherited.  Evidence: the method, the
    live scale that the checkpoint loses."""

    code = "AMP110"

    def install(self):
        self.patched: set = set()
        self.local = threading.local()
        # state_dict() results without scaler state, judged when they are saved (a checkpoint
        # that stores the scaler's state next to them is fine) or, never saved, at the end.
        self.pending: list[tuple[object, Site | None, dict]] = []
        yield self.on("scaler_init", self._init)
        yield self.on("load_state", self._load)
        yield self.on("save", self._save)

    def finish(self):
        for _, site, evidence in self.pending:
            self.sink.record_site(self.code, site, evidence)
        self.pending = []

    def _save(self, payload):
        if not self.pending:
            return
        kept = []
        for result, site, evidence in self.pending:
            if not torch_state.payload_holds(payload, {id(result)}):
                kept.append((result, site, evidence))
            elif not _holds_scaler_state(payload):
                self.sink.record_site(self.code, site, {**evidence, "saved_without_scaler_state": True})
        self.pending = kept

    def _init(self, scaler):
        owner = _builder()
        if owner is None:
            return
        cls = type(owner)
        for name in _METHODS:
            fn = getattr(cls, name, None)
            code = getattr(getattr(fn, "__amplint_original__", fn), "__code__", None)
            if code is None or (cls, name) in self.patched or not is_user_file(code.co_filename):
                continue
            self.patched.add((cls, name))
            self._handles.append(wrap(cls, name, self._maker(name)))

    def _maker(self, name: str):
        probe = self

        def maker(orig):
            def method(obj, *args, **kwargs):
                depth = getattr(probe.local, "depth", 0)
                probe.local.depth = depth + 1
                loaded = getattr(probe.local, "loaded", False)
                probe.local.loaded = False
                try:
                    result = orig(obj, *args, **kwargs)
                    if depth == 0:
                        probe._judge(obj, name, orig, result, probe.local.loaded)
                    return result
                finally:
                    probe.local.depth = depth
                    probe.local.loaded = loaded or probe.local.loaded

            return method

        return maker

    def _load(self, obj):
        if isinstance(obj, torch_state.BaseGradScaler) and getattr(self.local, "depth", 0):
            self.local.loaded = True

    def _judge(self, obj, name, orig, result, loaded) -> None:
        try:
            scalers = [v for v in vars(obj).values() if isinstance(v, torch_state.BaseGradScaler)]
        except TypeError:
            return
        scalers = [s for s in scalers if torch_state.scaler_enabled(s)]
        if not scalers:
            return
        if name == "state_dict" and len(self.state.owner_state_dicts) < 64:
            self.state.owner_state_dicts[id(result)] = result  # NB: kept alive, so the id stays its own
        if name == "state_dict" and _holds_scaler_state(result):
            return
        if name == "load_state_dict" and loaded:
            return
        cls = type(obj)
        own = getattr(orig, "__qualname__", "") == f"{cls.__qualname__}.{name}"
        site = _line_of(orig, "def") if own else _line_of(cls, "class")
        evidence = {"method": name, "scaler_state_saved" if name == "state_dict" else "scaler_restored": False,
                    "owner": cls.__name__, "live_scale": torch_state.scale_value(scalers[0])}
        if name == "state_dict" and len(self.pending) < 64:
            self.pending.append((result, site, evidence))
        else:
            self.sink.record_site(self.code, site, evidence)


PROBE = ScalerStateNotInStateDictProbe
