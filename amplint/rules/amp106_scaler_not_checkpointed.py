"""AMP106 scaler-not-checkpointed."""

from __future__ import annotations

import os
import re

import libcst as cst

from amplint.analysis.callees import ForeignClass, bases_of, classes_deriving_in_importers, resolve_class
from amplint.analysis.checkpoints import BY_NAME, Checkpoints
from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import SCALER_TOKENS, protocol
from amplint.analysis.steps import Kind
from amplint.analysis.syntax import call_arg
from amplint.analysis.wrappers import owned_scalers
from amplint.prefilter import Attr
from amplint.rules._base import Rule


# A write (or a call of a writer) and a word of training state beside it: what a module
# that names no scaler needs before its importers, or the code it calls, are looked at.
_WRITE_WORDS = ("torch.save", "save_state_dict", "dcp.save", re.compile(r"\bsave(?:_on_master|_checkpoint|_ckpt|_state)[\s\\]*\("))
_TRAINING_WORDS = ("optim", "epoch", "global_step", "state_dict")  # NB: a registry of modules saved by state_dict()


class ScalerNotCheckpointed(Rule):
    """
    ## What it does
    In a module that uses a GradScaler that may be enabled, flags each checkpoint
    write (`torch.save`, `torch.distributed.checkpoint.save`) whose payload holds
    optimizer state, or model state together with training progress (epoch, step,
    scheduler), but no scaler state. The payload is read through dicts, names,
    `dict(...)` and dataclasses (`asdict(Snapshot(model=..., optimizer=...))`,
    `dataclasses.replace`). A project helper (in any module: a function, a
    `Checkpointer` object's method, a function nested in `main()`) that builds the
    payload from its parameters or attributes is reported once, at its own write,
    when a module that calls it trains with an enabled scaler; a payload built by the
    caller and handed to a helper that only writes it is reported at that call (also
    through a writer that forwards `*args`: `save_on_master(*args, **kwargs)`). A
    scaler stepped only inside the functions the module calls (`engine.train_one_epoch`)
    counts as used. It also flags
    `optimizer.load_state_dict(...)` in a module that never restores a scaler with
    `scaler.load_state_dict(...)`. A module that saves or restores a scaler's state
    itself (a Trainer whose scaler steps inside a library, `self.accelerator.scaler`)
    counts as using one: its other checkpoints should carry that state too. So does a
    module that trains through Accelerate's backward (`accelerator.backward(loss)`) where
    the mixed precision may be float16 (a launcher flag, an option: read as on) and never
    calls `accelerator.save_state` / `load_state`: Accelerate's GradScaler is then live,
    and `accelerator.save(checkpoint, path)` counts as a write. A checkpoint written by a
    base class's method counts where a subclass in another module owns the GradScaler and
    inherits the method; a payload built from a registry the class keeps (`{name:
    m.state_dict() for name, m in self.checkpoint_modules.items()}`, also one registry
    per agent) holds what the class and its subclasses register there
    (`self.checkpoint_modules["optimizer"] = self.optimizer`). Code switched off by hand
    (`if False and ...:`) writes nothing.

    Not flagged: a bare export of weights (`torch.save(model.state_dict(), path)`), a
    payload we cannot see through (`**extra` of a dict built out of sight, a dict
    returned by another function), functions that save the scaler's state in a file of
    its own (also a helper such as `_save_optimizer(folder)` whose every caller in the
    module writes the scaler's file next to it), and a checkpoint written where no
    `scaler.step` / `update` can have run
    before it (a one-shot export that returns before the training loop): its scale is
    the initial one. A helper that builds its own scaler and saves without it holds the
    whole bug: it is reported inside the helper, not again at each call.

    ## Why is this bad?
    The loss scale is learned state: after thousands of steps it sits where fp16
    gradients neither overflow nor underflow. A run resumed without it restarts at
    65536, skips a burst of overflowing steps and re-learns the scale; with
    `growth_interval` steps between increases that costs a noticeable stretch of
    training, and the resumed run no longer reproduces the uninterrupted one.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    ...
    scaler.step(optimizer)
    scaler.update()
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
        "ckpt.pt",
    )
    ```

    Use instead:
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    ...
    scaler.step(optimizer)
    scaler.update()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,
        },
        "ckpt.pt",
    )
    ```
    and `scaler.load_state_dict(checkpoint["scaler"])` when resuming.

    ## Fix safety
    No fix: the scaler has to be saved and restored in two places, and the loading
    side often lives in another file.

    ## Runtime confirmation
    `amplint verify` inspects `torch.save` payloads while a scaler is live: optimizer
    state and no scaler state confirms the finding.
    """

    code = "AMP106"
    name = "scaler-not-checkpointed"
    message = "{what} saves {held} but not the GradScaler state"
    load_message = "`{call}` restores the optimizer, but no `scaler.load_state_dict(...)` restores the loss scale"
    # ... or Accelerate's backward, whose GradScaler lives in `accelerator.scaler`.
    requires_any = (*SCALER_TOKENS, ("accelerat", Attr("backward")))
    # A module that writes a checkpoint and names no scaler may hold the helper that a
    # module using a scaler calls (utils.py's `save_checkpoint`): the scaler is then in an
    # importer.  Only such a module looks upward.
    # A module that saves and names no scaler may also step one only inside the functions it
    # calls (`engine.train_one_epoch`): the scaler is then in the code it imports.
    and_requires_any = ((*SCALER_TOKENS, *((w, p) for w in _WRITE_WORDS for p in _TRAINING_WORDS), ("accelerat", "optim")),)
    importer_tokens = (0,)
    imported_tokens = (0,)
    elsewhere_tokens = {0: ("scaler",)}

    def check(self) -> None:
        proto = protocol(self.model)
        ckpt = Checkpoints(self.model)
        code = self.model.module.code_for_node
        if not uses_a_scaler(self.model, proto, ckpt):
            self._helper_writes(ckpt, code)
            if self.model.project is not None:
                self._loads(ckpt, code, inherited_only=True)
            return
        library_scaler = not proto.uses_enabled_scaler and _accelerate_scaler(self.model)
        for graph, ev, payload in unsaved_writes(self.model, ckpt):
            if ev.inlined and ev.scope.model is not self.model and not ckpt.handed_in(ev):
                continue  # the helper of another module builds the payload: reported once, at its own write
            held = _held(payload)
            what = f"`{code(ev.anchor.func)}(...)`"
            notes = ()
            if ev.qualname == BY_NAME or BY_NAME in payload.parts:
                helper = code(ev.node.func) if ev.qualname == BY_NAME else "the checkpoint helper"
                notes = (f"judged by the name and the arguments of `{helper}`: its code could not be read (not in the project)",)
            elif library_scaler:
                notes = (_ACCELERATE_NOTE,)
            self.report_event(ev, what=what, held=held, notes=notes)
        self._loads(ckpt, code)

    def _helper_writes(self, ckpt: Checkpoints, code) -> None:
        """A helper of this module (which uses no scaler itself) that builds a checkpoint
        from its parameters or attributes and writes it without a scaler, called from a
        module of the project that trains with an enabled one: reported once, at its write."""
        if self.model.project is None:
            return
        for graph in self.model.steps:
            if not isinstance(graph.scope.node, cst.FunctionDef):
                continue
            for ev in graph.of_kind(Kind.SAVE):
                if ev.inlined or ev.qualname == BY_NAME:
                    continue
                payload = ckpt.payload(ev)
                if not payload.known or payload.has_scaler or not payload.is_training_checkpoint or ckpt.handed_in(ev):
                    continue
                caller = _caller_with_a_scaler(self.model, graph.scope, code(ev.node))
                note = "called here, where a GradScaler steps"
                if caller is None:
                    caller = _subclass_with_a_scaler(self.model, graph.scope)
                    note = "a subclass that inherits this method owns a GradScaler, built here"
                if caller is None:
                    continue
                other, call = caller
                self.report(
                    ev.node, what=f"`{code(ev.node.func)}(...)`", held=_held(payload),
                    related=((other, call, note),),
                )

    def _loads(self, ckpt: Checkpoints, code, inherited_only: bool = False) -> None:
        """Resuming the optimizer from a file, in a module that never restores a scaler.
        `inherited_only`: in a module that uses no scaler itself, only in a method that a
        scaler-owning subclass of another module inherits.

        Through helpers too: `load_checkpoint(path, model, optimizer)` from utils.py is
        reported at its call, the place where this module could pass the scaler.
        """
        graphs = list(self.model.steps)
        if any(e.kind is Kind.LOAD and e.scaler is not None for g in graphs for e in g.events):
            return
        if not ckpt.loads_nothing_into_a_scaler():
            return
        for graph in graphs:
            for ev in graph.of_kind(Kind.LOAD):
                if inherited_only and (ev.inlined or _subclass_with_a_scaler(self.model, graph.scope) is None):
                    continue
                if ckpt.resumes_optimizer(ev):
                    call = code(ev.anchor.func) if ev.inlined else code(ev.node.func)
                    self.report_event(ev, message=self.load_message, call=call)


def uses_a_scaler(model, proto=None, ckpt=None) -> bool:
    """The module uses a GradScaler that may be enabled, or checkpoints one's state, or
    trains through Accelerate's backward in what may be float16 (its GradScaler lives in
    `accelerator.scaler`) without ever saving or loading the accelerator's state."""
    proto = proto or protocol(model)
    ckpt = ckpt or Checkpoints(model)
    return proto.uses_enabled_scaler or ckpt.keeps_scaler_state(proto.scaler_disabled) or _accelerate_scaler(model)


_ACCELERATE_NOTE = ("the GradScaler is Accelerate's (`accelerator.scaler`, live under float16 mixed precision): "
                   "`accelerator.save_state(dir)` / `load_state(dir)` keep it, or save `accelerator.scaler.state_dict()`")


def _accelerate_scaler(model) -> bool:
    """`accelerator.backward(loss)` where the Accelerator may run float16 mixed precision (an
    option, a launcher flag: read as on), and no `accelerator.save_state(...)` /
    `load_state(...)`, which would carry the scaler, anywhere in the module."""
    uses = any(
        e.kind is Kind.BACKWARD and e.managed and e.scales_loss
        and "accelerat" in (dotted(e.node.func.value) or "").lower()
        for g in model.steps for e in g.events if isinstance(e.node.func, cst.Attribute)
    )
    if not uses:
        return False
    for site in model.calls:
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("save_state", "load_state"):
            return False
    return True


def unsaved_writes(model, ckpt: Checkpoints):
    """(graph, SAVE event, payload) of each checkpoint write of the module's graphs (helpers'
    writes inlined at their calls included) that holds training state and no scaler state,
    where a scaler step can have run before it."""
    graphs = list(model.steps)
    saves_in = {id(g): [(e, ckpt.payload(e)) for e in g.of_kind(Kind.SAVE)] for g in graphs}
    keeps_scaler = {id(g) for g in graphs if any(p.has_scaler for _, p in saves_in[id(g)])}
    # The graphs that run each write: its own function's, and those of the functions
    # that reach it through helpers.
    runners: dict[int, list] = {}
    for g in graphs:
        for e, _ in saves_in[id(g)]:
            runners.setdefault(id(e.node), []).append(g)
    out = []
    for graph in graphs:
        if id(graph) in keeps_scaler:
            continue  # the scaler gets a file of its own next to these
        updates = graph.of_kind(Kind.SCALER_STEP, Kind.UPDATE)
        for ev, payload in saves_in[id(graph)]:
            if not payload.known or payload.has_scaler or not payload.is_training_checkpoint:
                continue
            callers = [g for g in runners[id(ev.node)] if g is not graph]
            if callers and all(id(g) in keeps_scaler for g in callers):
                continue  # a helper (`_save_optimizer`) whose every caller saves the scaler next to it
            if updates and not any(ev in graph.reachable(u) for u in updates):
                continue  # written before any scaler step can run (yolov5's one-shot export): its scale is the initial one
            if ev.inlined and any(n.kind is Kind.SCALER_NEW and n.inlined and n.anchor is ev.anchor for n in graph.events):
                continue  # the helper builds its own scaler and saves: the whole bug is inside it, reported there
            out.append((graph, ev, payload))
    return out


def _held(payload) -> str:
    return " and ".join(f"{part} state" for part in ("model", "optimizer") if part in payload.parts) or "training state"


def _caller_with_a_scaler(model, scope, write: str):
    """(module, call) of a project module that imports this one, uses an enabled scaler and
    runs the write `write` of the function `scope` through a call, unsaved; else None."""
    project = model.project
    name = scope.node.name.value
    here = os.path.abspath(model.path)
    word = name.lower()

    def wanted(text: str) -> bool:
        return word in text and "scaler" in text

    for path in project.importers_among(model.path, wanted):
        other = project.model_at(path)
        if other is None or not uses_a_scaler(other):
            continue
        for _, ev, _ in unsaved_writes(other, Checkpoints(other)):
            home = ev.scope.model
            if (
                ev.inlined
                and home is not other
                and os.path.abspath(home.path) == here
                and ev.scope.name == scope.name
                and home.module.code_for_node(ev.node) == write
            ):
                return other, ev.anchor
    return None


def _subclass_with_a_scaler(model, scope):
    """(module, GradScaler construction) of a class of a project module importing this one
    that derives from the class of the method `scope` and owns an enabled GradScaler
    (`self.scaler = GradScaler()` in `LTRTrainer(BaseTrainer)`): the method's checkpoint is
    that trainer's checkpoint, whichever module writes it.  None otherwise."""
    cls = getattr(scope, "cls", None)
    if cls is None:
        return None
    # the class and its subclasses of this module (`TrainerIter(BaseTrainer)`): another
    # module's trainer may derive from either
    names = {cls.name} | {c.name for c in model.classes.values() if any(b is cls for b in bases_of(c))}
    for sub in classes_deriving_in_importers(model, names):
        for owned in owned_scalers(sub):
            if owned.model.bindings.values.literal_bool(call_arg(owned.call, None, "enabled")) is not False:
                return owned.model, owned.call
        built = _builds_a_scaler_owner(sub, sub.model)
        if built is not None:
            return sub.model, built
    return None


def _builds_a_scaler_owner(cls, model) -> cst.Call | None:
    """A call in one of `cls`'s methods that builds an object of a project class owning an
    enabled GradScaler (`mpm = MixedPrecisionManager(activated)` in `train_iterations`,
    whose `self.scaler = GradScaler()`): the class trains with that scaler."""
    for site in model.calls:
        scope = site.scope
        if getattr(scope, "cls", None) is not cls:
            continue
        target = resolve_class(site.node.func, model)
        info = target.info() if isinstance(target, ForeignClass) else target
        if info is None or not hasattr(info, "attributes"):
            continue
        for owned in owned_scalers(info):
            if owned.model.bindings.values.literal_bool(call_arg(owned.call, None, "enabled")) is not False:
                return site.node
    return None
