"""AMP105 scaler-in-loop."""

from __future__ import annotations

import os

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import protocol
from amplint.analysis.steps import MANAGED_RECEIVER_WORDS, Kind, constructions_seen_from_importers
from amplint.analysis.casts import OPTIMIZER_TOKENS
from amplint.prefilter import Attr, Word
from amplint.rules._base import Rule

# Loop variables that name an independent run: each gets its own model, optimizer and
# scaler, so a fresh scaler per iteration is right.
_RUN_WORDS = ("fold", "run", "seed", "trial", "experiment", "exp", "config", "cfg", "split", "task", "repeat")


class ScalerInLoop(Rule):
    """
    ## What it does
    Flags `GradScaler(...)` constructed inside a training loop: lexically in a loop
    body, or in a function (`train_one_epoch`) that is called from inside a loop, in
    the same module or in another one. The finding points at the construction: the
    function that builds its own scaler per call is what to change (the loop that
    calls it is named in the message and as a related location). An object that owns
    a scaler (`NativeScaler()`, built in its `__init__`) and is itself built anew in
    the loop is reported at that construction in the loop.

    A loop over independent runs (cross-validation folds, seeds, experiments) that
    builds a new optimizer in the same iteration is not flagged: a fresh scaler per
    run is correct.

    ## Why is this bad?
    The scaler learns its loss scale over many steps: it starts at 65536, halves on
    every overflow and doubles only after 2000 clean steps. A new scaler per epoch or
    per batch throws that away, so each epoch begins with a run of overflowing,
    skipped steps, and the growth never gets to happen. Any state restored from a
    checkpoint is lost as well.

    ## Example
    ```python
    import torch

    for epoch in range(epochs):
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            ...
    ```

    Use instead:
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in loader:
            ...
    ```

    ## Fix safety
    No fix: hoisting the construction out of the loop (or out of the called function,
    into its caller) changes signatures and is not a local edit.

    ## Runtime confirmation
    `amplint verify` counts GradScaler instances that take part in a step; more than
    one per process confirms the finding.
    """

    code = "AMP105"
    name = "scaler-in-loop"
    message = "`{ctor}` is constructed in a loop{how}; its loss-scale history restarts every iteration"
    requires_any = ("GradScaler",)
    # The scaler may be built by a project function called in the loop (`train_one_epoch`,
    # a `Trainer(...)` per fold). Such a loop is a training loop, whose file names epochs,
    # steps, a trainer, fitting or an optimizer: without one of these it is not read further.
    and_requires_any = (("epoch", Word("train"), Word("fit"), "trainer", Attr("step"), "scaler", *OPTIMIZER_TOKENS),)
    imported_tokens = (0,)

    def check(self) -> None:
        seen: set[int] = set()
        for ev, how in self._per_iteration(self.model):
            if ev.scope.model is not self.model:
                if not _through_constructor(ev):
                    # A function of another module that builds its own scaler per call
                    # (`train_one_epoch`): reported at its construction, when that module
                    # is checked (like a checkpoint helper's write, AMP106).
                    continue
                # An object that owns a scaler (`NativeScaler()`) built anew per
                # iteration here: its `__init__` is right, the loop is ours to report.
                self.report_event(ev, ctor=self._ctor(ev, self.model), how=how)
                continue
            if id(ev.node) in seen:
                continue
            seen.add(id(ev.node))
            self.report(ev.node, ctor=self._ctor(ev, self.model), how=how)
        self._check_built_for_importers(seen)

    def _per_iteration(self, model):
        """(event, how) for each scaler construction that one run of `model`'s code
        repeats per iteration of a training loop: lexically in the loop, or in a function
        called from it (the event is then inlined at the call)."""
        proto = protocol(model)
        b = model.bindings
        disabled = {id(c.call) for c in b.scaler_constructions if c.enabled is False}
        targets = {id(c.call): c.target for c in b.scaler_constructions}
        seen: set[int] = set()
        for graph in model.steps:
            for ev in graph.of_kind(Kind.SCALER_NEW):
                if id(ev.node) in disabled or not ev.loops or id(ev.node) in seen or id(ev.anchor) in seen:
                    continue
                if self._built_by_an_engine(ev):
                    continue
                target = targets.get(id(ev.node))
                if target and any(g.cond == target and not g.holds for g in proto.guards(ev)):
                    continue  # `if scaler is None: scaler = GradScaler()`: built once, lazily
                loop = ev.loops[-1]
                if ev.inlined and not _contains(loop.node, ev.anchor):
                    # `main()` called at module level runs the epoch loop that calls
                    # `train()`: found at the call in the loop (main's own graph),
                    # not at `main()`.
                    continue
                if self._independent_run(loop.node, model):
                    continue
                if ev.inlined and self._builds_optimizer(ev.scope.node, ev.scope.model):
                    continue  # the called function sets up a whole run
                how = ""
                if ev.inlined:
                    how = f" (through `{model.module.code_for_node(ev.anchor.func)}()`, called in a loop)"
                seen.add(id(ev.node))
                if ev.inlined:
                    seen.add(id(ev.anchor))  # one finding per call, whichever branch builds it
                yield ev, how

    def _check_built_for_importers(self, reported: set[int]) -> None:
        """A function here builds a scaler and another module calls it in its loop
        (`engine.train_one_epoch`, called once per epoch by `main.py`): reported here, at
        the construction, with the loop's place as a related location."""
        candidates = [
            c for c in self.model.bindings.scaler_constructions
            if c.enabled is not False and id(c.call) not in reported and c.scope is not None and not c.scope.is_module
        ]

        def per_iteration(other):
            return [ev for ev, _ in self._per_iteration(other) if not _through_constructor(ev)]

        for mine, other, ev in constructions_seen_from_importers(self.model, candidates, lambda text: True, per_iteration):
            reported.add(id(mine))
            called = other.module.code_for_node(ev.anchor.func)
            how = f" (through `{called}()`, called in a loop in {os.path.basename(other.path)})"
            self.report(mine, ctor=self.model.module.code_for_node(mine.func) + "(...)", how=how,
                        related=((other, ev.anchor, f"`{called}()` is called in a loop here"),))

    @staticmethod
    def _ctor(ev, model) -> str:
        return ev.scope.model.module.code_for_node(ev.node.func) + "(...)"

    @staticmethod
    def _built_by_an_engine(ev) -> bool:
        """Built while constructing a training engine (`Accelerator(...)`, a `Trainer`, a
        DeepSpeed engine): a new engine per iteration is a new run with its own state,
        not a scaler thrown away.  A scaler wrapper (`NativeScaler()`) per epoch is."""
        for step in ev.via:
            cls, _, method = step.rpartition(".")
            name = cls.split(".")[-1].lower()
            if method == "__init__" and "scaler" not in name and any(w in name for w in MANAGED_RECEIVER_WORDS):
                return True
        return False

    def _independent_run(self, loop: cst.CSTNode, model) -> bool:
        if isinstance(loop, cst.For):
            names = [dotted(n) or "" for n in _target_names(loop.target)]
            for n in names:
                words = n.lower().replace("-", "_").split("_")
                if any(w in _RUN_WORDS or w.rstrip("s") in _RUN_WORDS for w in words):
                    return True
        return self._builds_optimizer(loop.body, model)

    @staticmethod
    def _builds_optimizer(node: cst.CSTNode | None, model) -> bool:
        if node is None:
            return False
        finder = _OptimizerFinder(model)
        node.visit(finder)
        return finder.found


def _through_constructor(ev) -> bool:
    """The scaler is built while an object is constructed (`NativeScaler()` -> `__init__`)."""
    return any(step.rpartition(".")[2] == "__init__" for step in ev.via)


def _contains(root: cst.CSTNode, target: cst.CSTNode) -> bool:
    """`target` is `root` or one of its descendants."""
    found = False

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal found
            if node is target:
                found = True
            return not found

    root.visit(_Find())
    return found


def _target_names(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _target_names(el.value)]
    return [target]


class _OptimizerFinder(cst.CSTVisitor):
    """An optimizer built here: a torch.optim constructor, or an assignment to `optimizer`."""

    def __init__(self, model) -> None:
        self.model = model
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if self.model.bindings.is_optimizer_constructor(node):
            self.found = True

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            text = (dotted(t.target) or "").split(".")[-1].lower()
            if text in ("optimizer", "optim", "opt") or text.endswith(("optimizer", "_optim", "_opt", "optimizers")):
                self.found = True
