"""Training-step event graphs: what happens, in which order, inside which autocast.

For every function (and the module body) we build a small control-flow graph whose
points carry the events rules care about: backward (scaled or not), `unscale_`,
clipping, `scaler.step`, `optimizer.step`, `update`, `zero_grad`, scaler construction,
checkpoint saves.  `if`/`else`, loops (with back edges), `try`, `with`, `break`,
`continue` and `return` shape the edges.  Calls to functions and methods defined in the
same module are inlined a bounded depth, so a `self._clip()` helper clips where it is
called; such events remember the call they were reached through (`anchor`), which is
where a diagnostic points.

Rules query the graph ("is a clip reachable from a scaled backward without passing an
unscale_?") instead of walking the CST themselves.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import libcst as cst

from amplint.analysis.autocast_entries import AutocastInfo
from amplint.analysis.callees import class_of_instance, resolve_call
from amplint.analysis.conditions import Fact, consistent, constant_truth, facts, literal_value
from amplint.analysis.grad_norms import is_grad_norm, managed_unscale
from amplint.analysis.names import dotted
from amplint.analysis.step_kinds import Kind
from amplint.analysis.syntax import call_arg, flag_text, returned_values, sets_true, target_names, value_branches
from amplint.analysis.walk import walk
from amplint.analysis.torch_api import (
    AUTOGRAD_BACKWARD,
    NO_GRAD_CONTEXTS,
    CLIP_FUNCTIONS,
    CLIP_METHODS,
    SCALER_CONSTRUCTORS,
    SHARDED_SCALER_CONSTRUCTORS,
)

MAX_INLINE_DEPTH = 3

# Methods a project's own wrapper may define where torch has events of the same name:
# an optimizer wrapper's backward/step/zero_grad, a scaler wrapper's scale/unscale_/update.
_WRAPPED_METHODS = frozenset({"backward", "step", "zero_grad", "update", "unscale_", "scale", "clip_grad_norm_",
                              "clip_grad_norm", "state_dict", "load_state_dict"})

# Receivers whose `.backward(loss)` / `.clip_grad_norm_()` are library-managed and
# unscale correctly (HF Accelerate, Lightning Fabric, DeepSpeed engines).
MANAGED_RECEIVER_WORDS = ("accelerator", "fabric", "engine", "deepspeed", "trainer", "strategy", "precision")
# Of those, the libraries whose managed backward scales the loss in float16 mixed precision
# (`Accelerator(mixed_precision="fp16")`, Fabric's "16-mixed") and unscales only in their
# own clip (`accelerator.clip_grad_norm_`, `fabric.clip_gradients`) or optimizer step.
# DeepSpeed's and trainers' engines keep gradients of their own and are not read.
SCALING_LIBRARY_WORDS = ("accelerator", "fabric")
# LightningModule's own clipping method (it does not unscale; see `classify`).
LIGHTNING_CLIP = "clip_gradients"


# A marker in `argument_keys`: the parameter key after it was bound to a scaler.
_SCALER_PARAMETER = "scaler-parameter:"


@dataclass(frozen=True, eq=False)
class AutocastRegion:
    info: AutocastInfo
    with_node: cst.With
    # Entered under `torch.no_grad()` / `inference_mode()` (a `with`, or a decorated
    # function inlined here): evaluation, whatever the function around it trains.
    no_grad: bool = False


def scaling_library_backward(call: cst.Call) -> bool:
    """A library's backward that scales the loss in float16 mixed precision and unscales
    in its own clip or optimizer step: Lightning's `self.manual_backward(loss)`, or
    `.backward(loss)` on a receiver that names Accelerate or Fabric."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value == "manual_backward":
        return True
    receiver = (dotted(func.value) or "").lower()
    return func.attr.value == "backward" and bool(call.args) and any(w in receiver for w in SCALING_LIBRARY_WORDS)


@dataclass(eq=False)
class Event:
    kind: Kind
    node: cst.Call
    anchor: cst.Call
    statement: cst.CSTNode
    scope: object
    regions: tuple[AutocastRegion, ...] = ()
    loops: tuple[object, ...] = ()
    scaler: str | None = None
    optimizer: str | None = None
    scaled: bool = False
    managed: bool = False
    via: tuple[str, ...] = ()
    # The calls an inlined event was reached through, outermost first, each with the scope
    # it is written in: `through[0][0]` is the anchor, `through[-1][0]` the call of the
    # function the event is written in (whose arguments give its parameters' values).
    through: tuple[tuple[cst.Call, object], ...] = ()
    qualname: str | None = None
    # The `if` conditions known to hold where the event runs: (normalised text, truth).
    guards: tuple[Fact, ...] = ()
    # GradScaler() constructions: the literal `enabled=` (None: decided at run time).
    enabled: bool | None = None

    @property
    def inlined(self) -> bool:
        return self.node is not self.anchor

    @property
    def scales_loss(self) -> bool:
        """A backward that leaves gradients multiplied by a loss scale until something unscales them.

        `scaler.scale(loss).backward()`, or a managed backward whose library scales the loss
        in float16 mixed precision: `accelerator.backward(loss)`, `fabric.backward(loss)`
        and Lightning's `self.manual_backward(loss)` (the precision plugin scales there and
        unscales only inside the optimizer step).  Code under an option is read as if the
        option were on: the run may be fp16.
        """
        if self.kind is not Kind.BACKWARD:
            return False
        if self.scaled or not self.managed:
            return self.scaled
        return scaling_library_backward(self.node)

    @property
    def inside_library_backward(self) -> bool:
        """Reached through a library's own backward (`accelerator.backward(loss)`), read
        because the library is part of the project (its own example scripts): the library
        then also owns the optimizer step, through the wrapper its `prepare` returns, as
        it does when it is not in the project and the call is a managed backward."""
        return any(scaling_library_backward(call) for call, _ in self.through)

    @property
    def active_autocast(self) -> AutocastRegion | None:
        """The innermost autocast region in force here, if any may be enabled.

        A nested `autocast(enabled=False)` for the same device (or an unknown one)
        switches the outer one off.
        """
        disabled_devices: set[str | None] = set()
        for region in reversed(self.regions):
            info = region.info
            if info.enabled is False:
                disabled_devices.add(info.device)
                continue
            if None in disabled_devices or info.device in disabled_devices:
                continue
            return region
        return None


@dataclass(eq=False)
class Point:
    event: Event | None = None
    succ: list["Point"] = field(default_factory=list)
    # Branch-entry markers (no event): the conditions that hold once control is here,
    # e.g. (`scaler`, False) at the start of the implicit `else` of `if scaler is not None:`.
    guards: tuple[Fact, ...] = ()
    # The entry of an `except` handler: paths through it are the exceptional ones.
    handler: bool = False
    # What an assignment of a literal says from here on (`found_oom = False`): it replaces
    # the path's facts about that name, so a later `if found_oom: continue` is decided.
    assigns: tuple[Fact, ...] = ()


@dataclass(eq=False)
class Loop:
    header: Point
    node: cst.CSTNode
    breaks: list[Point] = field(default_factory=list)
    # The points of the body (inlined helpers' included): what a path re-enters from
    # the header when it starts another iteration.
    body: frozenset[int] = frozenset()
    _assigned: frozenset[str] | None = None

    def exits(self) -> list[Point]:
        """The header's successors that leave the loop (the `else` block, or what follows)."""
        return [q for q in self.header.succ if id(q) not in self.body]

    def keep_invariant(self, facts: frozenset) -> frozenset:
        """The facts that still hold in the next iteration: no name they mention is assigned in the loop."""
        if self._assigned is None:
            self._assigned = _assigned_names(self.node)
        return frozenset(f for f in facts if not (_identifiers(f[0]) & self._assigned))


class StepGraph:
    """The event graph of one scope (a function, a method, or the module body)."""

    def __init__(self, scope) -> None:
        self.scope = scope
        self.entry = Point()
        self.exit = Point()
        self.points: list[Point] = [self.entry, self.exit]
        self._point_of: dict[int, Point] = {}
        self.loops: list[Loop] = []
        self._repeated: frozenset[str] | None = None
        self._headers: dict[int, Loop] | None = None
        self._guards_memo: dict[int, frozenset] = {}  # point -> its guards on `_repeated_conditions`
        # Every autocast region entered while building, inlined helpers' included, with or
        # without events inside (a forward-only `with autocast():` still is one).
        self.regions: list[AutocastRegion] = []

    @property
    def events(self) -> list[Event]:
        return [p.event for p in self.points if p.event is not None]

    def of_kind(self, *kinds: Kind) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def point(self, event: Event) -> Point:
        return self._point_of[id(event)]

    # --- for-loops over collections ------------------------------------------------------
    def loop_events(self, loop: "Loop") -> list[Event]:
        """The events inside a loop's body (inlined helpers' included)."""
        return [e for e in self.events if loop in e.loops]

    def runs_in_loop(self, point: Point, pred: Callable[[Event], bool]) -> bool:
        """`point` is the header of a `for` loop whose body has a `pred` event.

        `for opt in optimizers: scaler.unscale_(opt)` unscales every optimizer: reading
        the zero-iteration path (or a `continue` that skips the optimizers not stepped
        either) as "no unscale_" is the graph's imprecision, not the program's.  So a
        search that asks whether such an event happens counts entering the loop as
        running it.  `while` loops are not assumed to run.
        """
        loop = self._header_loops().get(id(point))
        return loop is not None and isinstance(loop.node, cst.For) and any(pred(e) for e in self.loop_events(loop))

    def _header_loops(self) -> dict[int, "Loop"]:
        if self._headers is None:
            self._headers = {id(loop.header): loop for loop in self.loops}
        return self._headers

    def reachable(
        self,
        start: Event | Point,
        *,
        stop: Callable[[Event], bool] = lambda e: False,
        include_start: bool = False,
        guarded: bool = False,
        stop_at: Callable[[Point], bool] | None = None,
    ) -> Iterator[Event]:
        """Events reachable after `start`, not walking past events for which `stop` holds.

        Stopping events are yielded themselves; loops are followed around their back
        edges, so "after" includes the next iteration.  `stop_at` stops the walk at a
        point (no event; e.g. a loop that runs a stopping event, `runs_in_loop`).

        `guarded=True` makes the walk path-sensitive for `if` conditions tested more than
        once: starting from an event under `if scaler is not None:`, the implicit `else`
        of a later `if scaler is not None: scaler.unscale_(opt)` is not a way around the
        unscale.  Conditions are compared by normalised text and are forgotten at a loop
        header when the loop assigns a name they mention (`if (i + 1) % k == 0`).
        """
        origin = self.point(start) if isinstance(start, Event) else start
        if not guarded:
            seen: set[int] = set()
            queue = deque(origin.succ if not include_start else [origin])
            while queue:
                p = queue.popleft()
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if p.event is not None:
                    yield p.event
                    if stop(p.event):
                        continue
                if stop_at is not None and stop_at(p):
                    continue
                queue.extend(p.succ)
            return
        yield from self._reachable_guarded(origin, stop, include_start, stop_at)

    # States of the path-sensitive walk before it falls back to forgetting conditions.
    _MAX_GUARDED_STATES = 20000

    @property
    def _repeated_conditions(self) -> frozenset[str]:
        """Condition texts tested at two or more branch markers: only those can contradict."""
        if self._repeated is None:
            count: dict[str, int] = {}
            for p in self.points:
                for text in {t for t, _ in p.guards + p.assigns}:
                    count[text] = count.get(text, 0) + 1
            self._repeated = frozenset(t for t, n in count.items() if n > 1)
        return self._repeated

    def _entering(self, p: Point, facts: frozenset, seen: set, headers: dict, tracked: frozenset) -> frozenset | None:
        """The facts a path holds once it enters `p`, or None when it cannot (a branch that
        contradicts what the path already decided) or need not (this state was explored)."""
        if len(seen) > self._MAX_GUARDED_STATES:
            facts = frozenset()  # NB: bounded cost; forgetting only adds paths
        if id(p) in headers and facts:
            facts = headers[id(p)].keep_invariant(facts)
        if p.guards:
            guards = self._tracked_guards(p, tracked)
            if guards:  # NB: facts hold tracked conditions only, so only these can contradict them
                if not consistent(facts, guards):
                    return None
                facts = facts | guards
        if p.assigns:
            names = {t for t, _ in p.assigns if t in tracked}
            if names:
                facts = frozenset(f for f in facts if f[0] not in names) | {
                    f for f in p.assigns if f[0] in names and f[1] is not FORGET}
        state = (id(p), facts)
        if state in seen:
            return None
        seen.add(state)
        return facts

    def _tracked_guards(self, p: Point, tracked: frozenset) -> frozenset:
        """The guards of `p` on conditions tested more than once (once per point)."""
        memo = self._guards_memo
        found = memo.get(id(p))
        if found is None:
            found = memo[id(p)] = frozenset(g for g in p.guards if g[0] in tracked)
        return found

    def _reachable_guarded(self, origin: Point, stop, include_start: bool, stop_at=None) -> Iterator[Event]:
        tracked = self._repeated_conditions
        start_facts = origin.event.guards if origin.event is not None else ()
        facts0 = frozenset((t, v) for t, v in start_facts if t in tracked)
        headers = self._header_loops()
        yielded: set[int] = set()
        seen: set[tuple[int, frozenset]] = set()
        queue = deque((p, facts0) for p in (origin.succ if not include_start else [origin]))
        while queue:
            p, facts = queue.popleft()
            facts = self._entering(p, facts, seen, headers, tracked)
            if facts is None:
                continue
            if p.event is not None:
                if id(p) not in yielded:
                    yielded.add(id(p))
                    yield p.event
                if stop(p.event):
                    continue
            if stop_at is not None and stop_at(p):
                continue
            queue.extend((q, facts) for q in p.succ)

    def search(self, start: Point | list[Point], *, found: Callable[[Point], bool],
               blocked: Callable[[Point], bool] = lambda p: False) -> bool:
        """Breadth-first from the successors of `start`, path-sensitive like
        `reachable(guarded=True)`: is a `found` point reachable without entering a
        `blocked` one, on a path whose `if` conditions never contradict each other?
        (A point that is both counts as found.)  The facts a start event runs under
        are the path's first facts."""
        origins = [start] if isinstance(start, Point) else list(start)
        tracked = self._repeated_conditions
        headers = self._header_loops()
        queue: deque = deque()
        for origin in origins:
            start_facts = origin.event.guards if origin.event is not None else ()
            facts0 = frozenset((t, v) for t, v in start_facts if t in tracked)
            queue.extend((q, facts0) for q in origin.succ)
        seen: set[tuple[int, frozenset]] = set()
        while queue:
            p, facts = queue.popleft()
            facts = self._entering(p, facts, seen, headers, tracked)
            if facts is None:
                continue
            if found(p):
                return True
            if blocked(p):
                continue
            queue.extend((q, facts) for q in p.succ)
        return False

    def iteration_through(self, loop: "Loop", target: Point, *, blocked: Callable[[Point], bool]) -> bool:
        """Some iteration of `loop` passes `target` and comes back to the header, on a path
        whose facts never contradict, starting from what the iteration itself establishes
        (`found_oom = False` before the step decides `if found_oom: continue` after it)."""
        tracked = self._repeated_conditions
        headers = self._header_loops()
        seen: tuple[set, set] = (set(), set())  # states before and after `target`
        queue: deque = deque((q, frozenset(), False) for q in loop.header.succ if id(q) in loop.body)
        while queue:
            p, facts, passed = queue.popleft()
            if p is loop.header:
                if passed:
                    return True
                continue
            if blocked(p) or id(p) not in loop.body:
                continue
            facts = self._entering(p, facts, seen[passed], headers, tracked)
            if facts is None:
                continue
            passed = passed or p is target
            queue.extend((q, facts, passed) for q in p.succ)
        return False

    def reaches_point(self, start: Event | Point, target: Point, *, stop: Callable[[Event], bool]) -> bool:
        """Whether `target` is reachable from `start` without passing a stopping event."""
        origin = self.point(start) if isinstance(start, Event) else start
        seen: set[int] = set()
        queue = deque(origin.succ)
        while queue:
            p = queue.popleft()
            if p is target:
                return True
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.event is not None and stop(p.event):
                continue
            queue.extend(p.succ)
        return False

    def loop_of(self, event: Event) -> Loop | None:
        """The innermost loop of *this* graph that holds the event."""
        for loop in reversed(self.loops):
            if loop in event.loops:
                return loop
        return None


class _CallCollector(cst.CSTVisitor):
    """Calls of an expression in evaluation order (arguments before the call)."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def leave_Call(self, original_node: cst.Call) -> None:
        self.calls.append(original_node)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def calls_in(node: cst.CSTNode | None) -> list[cst.Call]:
    if node is None:
        return []
    collector = _CallCollector()
    walk(node, collector)
    return collector.calls


def _ensures_unscaled(node: cst.If, function: cst.CSTNode, model) -> bool:
    """`if not unscaled: scaler.unscale_(opt)` where every `unscaled = True` of the function
    comes right after an `unscale_` call: the idiom "unscale unless done already".  Past
    it the gradients are unscaled on every path, which a path-insensitive graph would not
    see (it also walks the path where neither unscale_ ran)."""
    test = node.test
    if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)):
        return False
    flag = flag_text(test.expression)  # `unscaled`, `state.unscaled`, `st["unscaled"]`
    if flag is None:
        return False
    body = _statements(node.body)
    if not body or not all(_calls_unscale(stmt, model) for stmt in body[:1]):
        return False
    finder = _FlagSetters(flag, model)
    walk(function, finder)
    return finder.setters > 0 and finder.after_unscale == finder.setters


def _calls_unscale(stmt: cst.CSTNode, model) -> bool:
    return ".unscale_(" in model.module.code_for_node(stmt) if isinstance(stmt, cst.SimpleStatementLine) else False


class _FlagSetters(cst.CSTVisitor):
    """How many `flag = True` statements a function holds, and how many of them come right
    after a statement that calls `unscale_`."""

    def __init__(self, flag: str, model) -> None:
        self.flag, self.model = flag, model
        self.setters = self.after_unscale = 0

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._block(node.body)

    def visit_Module(self, node: cst.Module) -> None:
        self._block(node.body)

    def _block(self, body) -> None:
        for i, stmt in enumerate(body):
            if sets_true(stmt, self.flag):
                self.setters += 1
                self.after_unscale += i > 0 and _calls_unscale(body[i - 1], self.model)


def _aliased(key: str, alias: tuple[str, str]) -> str:
    """`Base.self.scaler` as `T.self.scaler` where a `Base` method runs on a `T`'s self."""
    own, outer = alias
    if key == f"{own}.self" or key.startswith(f"{own}.self."):
        return outer + key[len(own):]
    return key


class _Builder:
    def __init__(self, model, graph: StepGraph) -> None:
        self.graph = graph
        self.frontier = [graph.entry]
        self.regions: list[AutocastRegion] = []
        self.loops: list[Loop] = []
        self.inline_stack: list[cst.FunctionDef] = []
        self.return_targets: list[list[Point]] = []
        self.anchor: cst.Call | None = None
        self.statement: cst.CSTNode | None = None
        self.scope = graph.scope
        self.via: tuple[str, ...] = ()
        self.through: tuple[tuple[cst.Call, object], ...] = ()
        self.guards: tuple[Fact, ...] = ()
        self.literal_names: set[str] = set()  # names some assignment gave a literal (`found = False`)
        self.no_grad = False  # inside `with torch.no_grad():` or a no_grad-decorated helper
        # (class whose `self` the current scope's `self` is, the class that names it): a
        # base-class method reached by `self.after_step()` updates the subclass
        # instance's `self.scaler`, so its keys are the caller's (`T.self.scaler`, not
        # `Base.self.scaler`).
        self.self_alias: tuple[str, str] | None = None
        # The key of an inlined helper's parameter -> the caller's key of the argument bound to
        # it: `helper(self.grad_scaler)` whose body calls `grad_scaler.step(opt)` steps the
        # caller's `self.grad_scaler`, which the caller then updates.
        self.argument_keys: dict[str, str] = {}

    # The module whose code is being read: the graph's own, or the module of an inlined
    # function from elsewhere in the project (names there qualify through its imports).
    @property
    def model(self):
        return self.scope.model

    @property
    def b(self):
        return self.scope.model.bindings

    # --- graph plumbing ------------------------------------------------------------------
    @property
    def frontier(self) -> list[Point]:
        return self._frontier

    @frontier.setter
    def frontier(self, points: list[Point]) -> None:
        # NB: merges (if/else, try, loops) concatenate frontiers; without de-duplication a
        # run of `if`s without events doubles the list each time (exponential on real code).
        seen: set[int] = set()
        self._frontier = [p for p in points if not (id(p) in seen or seen.add(id(p)))]

    def _new_point(self, event: Event | None = None) -> Point:
        p = Point(event)
        self.graph.points.append(p)
        if event is not None:
            self.graph._point_of[id(event)] = p
        for f in self.frontier:
            f.succ.append(p)
        self.frontier = [p]
        return p

    def _branch(self, facts: tuple[tuple[str, bool], ...]) -> None:
        """Enter a branch: a marker point carrying what its condition establishes."""
        if facts:
            marker = self._new_point()
            marker.guards = facts
            self.guards = self.guards + facts

    def _conditions(self, test: cst.BaseExpression) -> tuple[tuple, tuple]:
        """(facts when `test` is true, facts when it is false), normalised by text.

        Remembered per test on the model: a helper's conditions are met again in every
        graph it is inlined into (trainer.py: 93 graphs, 5,700 conditions turned into text)."""
        memo = self.model.__dict__.setdefault("_amplint_conditions", {})
        found = memo.get(test)
        if found is None:
            code = self.model.module.code_for_node
            found = memo[test] = (facts(test, code, True), facts(test, code, False))
        return found

    def build_body(self, body: cst.CSTNode) -> None:
        self.block(_statements(body))
        for f in self.frontier:
            f.succ.append(self.graph.exit)
        for targets in self.return_targets:
            for f in targets:
                f.succ.append(self.graph.exit)

    def block(self, stmts) -> None:
        for s in stmts:
            if not self.frontier:
                return  # unreachable after return/raise/break/continue
            self.statement_(s)

    # --- statements ----------------------------------------------------------------------
    def statement_(self, s: cst.CSTNode) -> None:
        outer = self.statement
        if not self.inline_stack:
            self.statement = s
        try:
            self._statement(s)
        finally:
            if not self.inline_stack:
                self.statement = outer

    def _statement(self, s: cst.CSTNode) -> None:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                self.small(small)
                if not self.frontier:
                    return
        elif isinstance(s, cst.If) and constant_truth(s.test) is not None:
            # `if False and ...:` (code switched off by hand) never runs; `if True:` always does.
            if constant_truth(s.test):
                self.block(_statements(s.body))
            elif isinstance(s.orelse, cst.If):
                self.statement_(s.orelse)
            elif s.orelse is not None:
                self.block(_statements(s.orelse.body))
        elif isinstance(s, cst.If):
            self.expr(s.test)
            start = self.frontier
            when_true, when_false = self._conditions(s.test)
            self._branch(when_true)
            self.block(_statements(s.body))
            self.guards = self.guards[: len(self.guards) - len(when_true)]
            after_body = self.frontier
            self.frontier = start
            self._branch(when_false)
            if s.orelse is not None:
                if isinstance(s.orelse, cst.If):
                    self.statement_(s.orelse)
                else:
                    self.block(_statements(s.orelse.body))
            self.guards = self.guards[: len(self.guards) - len(when_false)]
            if s.orelse is None and _ensures_unscaled(s, self.scope.node, self.model):
                self.frontier = after_body  # the other way holds only where an unscale_ ran already
            else:
                self.frontier = after_body + self.frontier
        elif isinstance(s, (cst.For, cst.While)):
            self.expr(s.iter if isinstance(s, cst.For) else s.test)
            header = self._new_point()
            loop = Loop(header=header, node=s)
            self.graph.loops.append(loop)
            self.loops.append(loop)
            first_of_body = len(self.graph.points)
            self.block(_statements(s.body))
            loop.body = frozenset(id(p) for p in self.graph.points[first_of_body:])
            for f in self.frontier:
                f.succ.append(header)
            self.loops.pop()
            if _runs_forever(s):
                # `while True:` leaves by a break, or by an exception some caller or `try`
                # handles after any number of iterations: an exit marked exceptional (no path
                # that matters to a rule of iterations runs it; what follows stays reachable).
                # Its `else` never runs.
                self.frontier = [header]
                leave = self._new_point()
                leave.handler = True
                self.frontier = loop.breaks + [leave]
            else:
                self.frontier = [header]
                if s.orelse is not None:
                    self.block(_statements(s.orelse.body))
                self.frontier = self.frontier + loop.breaks
        elif isinstance(s, cst.Try) or type(s).__name__ == "TryStar":
            start = list(self.frontier)
            first_loop = len(self.graph.loops)
            self.block(_statements(s.body))
            # `try: while True: train() except KeyboardInterrupt: save()`: an endless loop
            # leaves only by a break or an exception, which a handler may catch after any
            # iteration (its header stands for "after some iterations").
            after_body = self.frontier + [loop.header for loop in self.graph.loops[first_loop:] if _runs_forever(loop.node)]
            if s.orelse is not None:
                self.block(_statements(s.orelse.body))
            ends = list(self.frontier)
            for handler in s.handlers:
                # NB: a handler may start after any statement of the body; we approximate
                # that with the body's start and end, which keeps the graph small.
                self.frontier = start + after_body
                self._new_point().handler = True
                self.block(_statements(handler.body))
                ends += self.frontier
            self.frontier = ends
            if s.finalbody is not None:
                # `finally:` runs when the body leaves by an exception too (`try: while True:
                # train() finally: save()`): entered from where a handler could start.
                # NB: past it the exception goes on; continuing after the `try` over-approximates.
                self.frontier = ends + start + after_body
                self.block(_statements(s.finalbody.body))
        elif isinstance(s, cst.With):
            pushed = 0
            grad_was = self.no_grad
            for item in s.items:
                self.expr(item.item)
                if self._disables_grad(item.item):
                    self.no_grad = True
                infos = self.b.autocast_of(item.item, self.scope)
                if infos:
                    info = _merge_autocast(infos)
                    self.regions.append(AutocastRegion(info, s, no_grad=self.no_grad))
                    self.graph.regions.append(self.regions[-1])
                    pushed += 1
            self.block(_statements(s.body))
            for _ in range(pushed):
                self.regions.pop()
            self.no_grad = grad_was
        elif isinstance(s, cst.Match) if hasattr(cst, "Match") else False:
            self.expr(s.subject)
            start = self.frontier
            ends: list[Point] = []
            for case in s.cases:
                self.frontier = start
                self.block(_statements(case.body))
                ends += self.frontier
            self.frontier = ends + start
        # FunctionDef / ClassDef: defining is not running; they get graphs of their own.

    def small(self, s: cst.BaseSmallStatement) -> None:
        if isinstance(s, cst.Return):
            self.expr(s.value)
            if self.return_targets:
                self.return_targets[-1].extend(self.frontier)
            else:
                for f in self.frontier:
                    f.succ.append(self.graph.exit)
            self.frontier = []
        elif isinstance(s, cst.Raise):
            self.expr(s.exc)
            self.frontier = []
        elif isinstance(s, cst.Break):
            if self.loops:
                self.loops[-1].breaks.extend(self.frontier)
            self.frontier = []
        elif isinstance(s, cst.Continue):
            if self.loops:
                for f in self.frontier:
                    f.succ.append(self.loops[-1].header)
            self.frontier = []
        elif isinstance(s, (cst.Expr, cst.Assign, cst.AnnAssign, cst.AugAssign)):
            value = s.value
            self.expr(value)
            self._assignment_facts(s)
        elif isinstance(s, (cst.Del, cst.Assert)):
            self.expr(getattr(s, "test", None))

    def _assignment_facts(self, s: cst.BaseSmallStatement) -> None:
        """What an assignment says of the names it binds: `found = False` is a fact a later
        `if found:` is decided by; any other value bound to a name that was given a literal
        (`resume = None`, then `resume = torch.load(path)`) forgets what was known of it."""
        fact = _literal_assignment(s)
        if fact is not None:
            self.literal_names.add(fact[0])
            self._new_point().assigns = (fact,)
            return
        targets = [t.target for t in s.targets] if isinstance(s, cst.Assign) else (
            [s.target] if isinstance(s, (cst.AugAssign, cst.AnnAssign)) else [])
        forgotten = tuple((n, FORGET) for t in targets for n in sorted(target_names(t)) if n in self.literal_names)
        if forgotten:
            self._new_point().assigns = forgotten

    # --- expressions ---------------------------------------------------------------------
    def expr(self, node: cst.CSTNode | None) -> None:
        for call in calls_in(node):
            self.call(call)

    def call(self, call: cst.Call) -> None:
        outer_anchor = self.anchor
        if not self.inline_stack:
            self.anchor = call
        try:
            # `self.optim.backward(loss)` / `.step()` of a project class (an optimizer
            # wrapper that owns the scaler) runs that class's method: read it, rather than
            # taking the call for a plain backward or step.
            wrapper = self.callee(call) if self._method_of_an_instance(call) else None
            if wrapper is not None:
                self.inline(wrapper, call)
                return
            event = self.classify(call)
            if event is not None:
                self._new_point(event)
                return
            callee = self.callee(call)
            if callee is not None:
                self.inline(callee, call)
        finally:
            if not self.inline_stack:
                self.anchor = outer_anchor

    def make_event(self, kind: Kind, call: cst.Call, **kw) -> Event:
        for which in ("scaler", "optimizer"):
            if kw.get(which) is not None:
                kw[which] = self._caller_key(kw[which])
        return Event(
            kind=kind,
            node=call,
            anchor=self.anchor or call,
            statement=self.statement,
            scope=self.scope,
            regions=tuple(self.regions),
            loops=tuple(self.loops),
            via=self.via,
            through=self.through,
            guards=self.guards,
            **kw,
        )

    def classify(self, call: cst.Call) -> Event | None:
        func = call.func
        qual = self.model.qualify(func)
        scope = self.scope
        b = self.b
        if qual in CLIP_FUNCTIONS:
            return self.make_event(Kind.CLIP, call, qualname=qual)
        if is_grad_norm(call, qual, scope):
            return self.make_event(Kind.GRAD_NORM, call, qualname=qual or dotted(func))
        if qual in AUTOGRAD_BACKWARD:
            tensors = call_arg(call, 0, "tensors")
            scaler = self._scaled_by(tensors)
            return self.make_event(Kind.BACKWARD, call, qualname=qual, scaled=scaler is not None, scaler=scaler)
        if qual in SCALER_CONSTRUCTORS or qual in SHARDED_SCALER_CONSTRUCTORS:
            enabled = b.values.literal_bool(call_arg(call, 4 if qual.startswith(("torch.cuda", "torch.cpu")) else 5, "enabled"))
            return self.make_event(Kind.SCALER_NEW, call, qualname=qual, enabled=enabled)
        from amplint.analysis.checkpoints import ACCELERATE_SAVE, BY_NAME, WRITES, saves_checkpoint_by_name, unresolvable

        if qual in WRITES:
            return self.make_event(Kind.SAVE, call, qualname=qual)
        if (qual is None and isinstance(func, cst.Attribute) and func.attr.value == "save" and call.args
                and "accelerat" in (dotted(func.value) or "").lower()):
            # `accelerator.save(checkpoint, path)`: torch.save on the main process
            return self.make_event(Kind.SAVE, call, qualname=ACCELERATE_SAVE)

        if saves_checkpoint_by_name(call) and unresolvable(call, scope):
            # `save_checkpoint(model, optimizer, epoch, path)` from a module amplint cannot
            # read (not in the project): judged by its name and arguments, and said so.
            return self.make_event(Kind.SAVE, call, qualname=BY_NAME)
        if qual is None and isinstance(func, cst.Name) and func.value in CLIP_METHODS and func.value not in self.model.functions:
            # `from torch.nn.utils import *` leaves the name unresolved; the spelling is unique enough.
            return self.make_event(Kind.CLIP, call, qualname=func.value)
        if not isinstance(func, cst.Attribute):
            return None
        name = func.attr.value
        receiver = func.value
        recv_text = (dotted(receiver) or "").lower()
        if name == "backward":
            receiver = passed_through(receiver, self.model)
            recv_text = (dotted(receiver) or "").lower()
            if any(w in recv_text for w in MANAGED_RECEIVER_WORDS) and call.args:
                return self.make_event(Kind.BACKWARD, call, managed=True, qualname=f"{recv_text}.backward")
            owner = library_owned(self.model).get(dotted(receiver) or "")
            if owner is not None and (call.args or owner.startswith("apex.")):
                # `model.backward(loss)` of the engine `deepspeed.initialize` returned, the
                # `scaled_loss` of apex's `amp.scale_loss`: the library scales, not the user.
                return self.make_event(Kind.BACKWARD, call, managed=True, qualname=f"{owner}:{dotted(receiver)}.backward")
            scaler = self._scaled_by(receiver)
            return self.make_event(Kind.BACKWARD, call, scaled=scaler is not None, scaler=scaler)
        if name == "manual_backward":
            return self.make_event(Kind.BACKWARD, call, managed=True)
        scaler_receiver = b.is_scaler(receiver, scope) or self._bound_scaler(receiver)
        if name == "unscale_" and scaler_receiver:
            return self.make_event(
                Kind.UNSCALE, call, scaler=b.key(receiver, scope), optimizer=b.key(call_arg(call, 0, "optimizer"), scope)
            )
        if name == "step" and scaler_receiver:
            return self.make_event(
                Kind.SCALER_STEP, call, scaler=b.key(receiver, scope), optimizer=b.key(call_arg(call, 0, "optimizer"), scope)
            )
        if name == "update" and scaler_receiver:
            return self.make_event(Kind.UPDATE, call, scaler=b.key(receiver, scope))
        if name == "step" and b.is_optimizer(receiver, scope):
            return self.make_event(Kind.OPT_STEP, call, optimizer=b.key(receiver, scope))
        if name == "zero_grad":
            return self.make_event(Kind.ZERO_GRAD, call, optimizer=b.key(receiver, scope))
        if name == "load_state_dict":
            if b.is_scaler(receiver, scope):
                return self.make_event(Kind.LOAD, call, scaler=b.key(receiver, scope))
            if b.is_optimizer(receiver, scope):
                return self.make_event(Kind.LOAD, call, optimizer=b.key(receiver, scope))
            return None
        if managed_unscale(call):
            # accelerator.clip_grad_norm_ unscales first: no clip of scaled gradients
            return self.make_event(Kind.MANAGED_UNSCALE, call, managed=True, qualname=f"{recv_text}.{name}")
        if name in CLIP_METHODS and qual is None and self.callee(call) is None:
            if any(w in recv_text for w in MANAGED_RECEIVER_WORDS):
                return None  # a trainer's or engine's clip_grad_norm_ unscales first
            return self.make_event(Kind.CLIP, call, qualname=f"{dotted(receiver) or '<expr>'}.{name}")
        if name == LIGHTNING_CLIP and isinstance(receiver, cst.Name) and receiver.value == scope.self_name:
            # `self.clip_gradients(opt, ...)` of a LightningModule (the method is the library's,
            # not the project's): the precision plugin clips as it finds the gradients, and
            # unscales them only in the optimizer step (Lightning issue #18089).  After
            # `manual_backward` that is a clip of scaled gradients; in the automatic
            # `configure_gradient_clipping` hook no backward precedes it in the graph.
            if resolve_call(call, scope) is None:
                return self.make_event(Kind.CLIP, call, qualname=f"{receiver.value}.{name}")
        return None

    def _scaled_by(self, tensor: cst.BaseExpression | None, depth: int = 0) -> str | None:
        """The scaler key when `tensor` is `scaler.scale(x)` or a name bound to one."""
        if tensor is None or depth > 3:
            return None
        tensor = passed_through(tensor, self.model)
        for branch in value_branches(tensor):
            if isinstance(branch, cst.BinaryOperation):
                # `(scaler.scale(loss) / accum_steps).backward()`
                found = self._scaled_by(branch.left, depth + 1) or self._scaled_by(branch.right, depth + 1)
                if found is not None:
                    return found
                continue
            if isinstance(branch, cst.Subscript):
                # `scaled = scaler.scale([l1, l2]); scaled[0].backward()`: an element of what it scaled
                found = self._scaled_by(branch.value, depth + 1)
                if found is not None:
                    return found
                continue
            if isinstance(branch, cst.Call) and isinstance(branch.func, cst.Attribute) and branch.func.attr.value == "scale":
                key = self._scaler_of(branch.func.value)
                if key is not None and not self._returns_its_argument(branch):
                    return key
            if isinstance(branch, cst.Call) and isinstance(branch.func, (cst.Name, cst.Attribute)):
                # `scale = scaler.scale` ... `scale(loss)`: the scaler's bound method
                for value, _ in self.b.values.assigned(branch.func, self.scope):
                    if isinstance(value, cst.Attribute) and value.attr.value == "scale":
                        key = self._scaler_of(value.value)
                        if key is not None:
                            return key
            if isinstance(branch, cst.Call):
                # `loss = self.scale_loss(loss)`: a helper of the project (an inherited
                # method among them) that returns `scaler.scale(...)`
                found = self._scaled_by_helper(branch, depth)
                if found is not None:
                    return found
            if isinstance(branch, (cst.Name, cst.Attribute)):
                for value, _ in self.b.values.assigned(branch, self.scope):
                    found = self._scaled_by(value, depth + 1)
                    if found is not None:
                        return found
        return None

    def _scaled_by_helper(self, call: cst.Call, depth: int) -> str | None:
        """The scaler key when the function `call` runs returns a scaled tensor on some path,
        as the caller names that scaler."""
        callee = resolve_call(call, self.scope)
        if callee is None or callee.scope is None or callee.fn in self.inline_stack or callee.fn is self.scope.node:
            return None
        saved = self.scope
        alias = self._self_alias_into(callee.scope, call)
        self.scope = callee.scope
        try:
            for value in returned_values(callee.fn):
                found = self._scaled_by(value, depth + 1)
                if found is not None:
                    return _aliased(found, alias) if alias is not None else found
        finally:
            self.scope = saved
        return None

    def _scaler_of(self, expr: cst.BaseExpression, depth: int = 0) -> str | None:
        """The scaler key of `expr`: a scaler, or a name some assignment makes an alias of
        one (`s = scaler`; also `s = self.scaler`)."""
        if self.b.is_scaler(expr, self.scope):
            return self.b.key(expr, self.scope)
        if depth > 2 or not isinstance(expr, (cst.Name, cst.Attribute)):
            return None
        for value, vscope in self.b.values.assigned(expr, self.scope):
            if isinstance(value, (cst.Name, cst.Attribute)):
                if vscope.model.bindings.is_scaler(value, vscope):
                    return vscope.model.bindings.key(value, vscope)
                if depth < 2 and vscope is self.scope:
                    found = self._scaler_of(value, depth + 1)
                    if found is not None:
                        return found
        return None

    def _returns_its_argument(self, call: cst.Call) -> bool:
        """`x.scale(loss)` of a project class (never a torch GradScaler) whose `scale` is
        `return loss`: a stand-in scaler for the fp32 path, that scales nothing."""
        if not self._method_of_an_instance(call):
            return False
        found = resolve_call(call, self.scope)
        if found is None or found.fn is None:
            return False
        body = [s for s in _statements(found.fn.body) if not _is_docstring(s)]
        params = [p.name.value for p in found.fn.params.params]
        if len(body) != 1 or len(params) < 2 or not isinstance(body[0], cst.SimpleStatementLine):
            return False
        ret = body[0].body[0]
        return isinstance(ret, cst.Return) and isinstance(ret.value, cst.Name) and ret.value.value == params[1]

    # --- inlining ------------------------------------------------------------------------
    def callee(self, call: cst.Call):
        """The function this call runs, if it is ours to inline (amplint/analysis/callees.py)."""
        if len(self.inline_stack) >= MAX_INLINE_DEPTH:
            return None
        found = resolve_call(call, self.scope)
        if found is None or found.fn in self.inline_stack or found.fn is self.scope.node:
            return None
        if found.scope is None:
            return None
        return found

    def inline(self, callee, call: cst.Call) -> None:
        eventless = callee.model.__dict__.setdefault("_amplint_eventless", set())
        if id(callee.fn) in eventless:
            return  # inlined before, with the whole depth budget, and nothing happened in it
        top = not self.inline_stack
        before = (sum(1 for p in self.graph.points if p.event is not None), len(self.graph.regions))
        self._inline(callee, call)
        after = (sum(1 for p in self.graph.points if p.event is not None), len(self.graph.regions))
        if top and before == after:
            eventless.add(id(callee.fn))

    def _method_of_an_instance(self, call: cst.Call) -> bool:
        """`x.method(...)` where `x` holds an instance of a class defined in the project, or
        `self.backward(loss)` / `self.step()`: the class's own method of that name (a
        trainer's `backward` that scales only when it has a scaler), not torch's."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _WRAPPED_METHODS:
            return False
        if isinstance(func.value, cst.Name) and func.value.value == self.scope.self_name:
            return True  # NB: `callee` decides whether the class (or a base) defines it
        if class_of_instance(func.value, self.scope) is None:
            return False
        # `GradScaler() if use_amp else DummyGradScaler()`: a stand-in whose `scale` returns
        # the loss and whose `step` calls `optimizer.step()` is its own object; on the path
        # that scales, the calls are torch's GradScaler protocol, and that is what is read.
        return not self._torch_scaler_too(func.value)

    def _torch_scaler_too(self, receiver: cst.BaseExpression) -> bool:
        """Some value assigned to `receiver` is a torch GradScaler construction."""
        for value, vscope in self.b.values.assigned(receiver, self.scope):
            for branch in value_branches(value):
                if isinstance(branch, cst.Call):
                    qual = vscope.model.qualify(branch.func)
                    if qual in SCALER_CONSTRUCTORS or qual in SHARDED_SCALER_CONSTRUCTORS:
                        return True
        return False

    def _disables_grad(self, expr: cst.BaseExpression) -> bool:
        """`torch.no_grad()`, `torch.inference_mode()` (called or not)."""
        target = expr.func if isinstance(expr, cst.Call) else expr
        return self.model.qualify(target) in NO_GRAD_CONTEXTS

    def _inline(self, callee, call: cst.Call) -> None:
        callee_scope = callee.scope
        saved = (self.scope, self.via, self.through, self.no_grad, self.self_alias, self.argument_keys)
        self.argument_keys = {**self.argument_keys, **self._arguments_into(callee, call)}
        self.self_alias = self._self_alias_into(callee_scope, call)
        self.through = (*self.through, (call, self.scope))
        if any(self._decorator_disables_grad(d.decorator, callee.model) for d in callee.fn.decorators):
            self.no_grad = True
        self.inline_stack.append(callee.fn)
        self.return_targets.append([])
        self.scope = callee_scope
        name = callee_scope.name
        if callee.model is not self.graph.scope.model:
            name = f"{module_label(callee.model)}.{name}"
        self.via = (*self.via, name)
        try:
            self.block(_statements(callee.fn.body))
            self.frontier = self.frontier + self.return_targets[-1]
        finally:
            self.return_targets.pop()
            self.inline_stack.pop()
            self.scope, self.via, self.through, self.no_grad, self.self_alias, self.argument_keys = saved

    def _bound_scaler(self, receiver: cst.BaseExpression) -> bool:
        """`receiver` is a parameter of an inlined helper that the caller handed a scaler."""
        if not self.argument_keys or not isinstance(receiver, cst.Name):
            return False
        key = self.b.key(receiver, self.scope)
        return key is not None and _SCALER_PARAMETER + key in self.argument_keys

    def _caller_key(self, key: str) -> str:
        """`key` as the outermost caller names it: through `self` aliases and bound arguments."""
        if self.self_alias is not None:
            key = _aliased(key, self.self_alias)
        for param, bound in self.argument_keys.items():
            if param.startswith(_SCALER_PARAMETER):
                continue
            if key == param or key.startswith(param + "."):
                return bound + key[len(param):]
        return key

    def _arguments_into(self, callee, call: cst.Call) -> dict[str, str]:
        """The callee's parameter keys bound to a scaler or optimizer the caller names: only
        plain names and attributes, matched by position (after a method's `self`) or keyword."""
        callee_scope = callee.scope
        params = list(callee.fn.params.params)
        decorators = {dotted(d.decorator) for d in callee.fn.decorators}
        if callee_scope.cls is not None and "staticmethod" not in decorators and isinstance(call.func, cst.Attribute):
            params = params[1:]
        by_name = {p.name.value: p for p in (*params, *callee.fn.params.kwonly_params)}
        bound: dict[str, str] = {}
        for index, arg in enumerate(call.args):
            if arg.star:
                break
            if arg.keyword is not None:
                param = by_name.get(arg.keyword.value)
            else:
                param = params[index] if index < len(params) else None
            if param is None or not isinstance(arg.value, (cst.Name, cst.Attribute)):
                continue
            if not (self.b.is_scaler(arg.value, self.scope) or self.b.is_optimizer(arg.value, self.scope)):
                continue
            caller = self._scaler_of(arg.value) or self.b.key(arg.value, self.scope)
            if caller is None:
                continue
            name = param.name.value
            key = f"{callee_scope.name}@{id(callee_scope)}:{name}"
            bound[key] = self._caller_key(caller)
            if self.b.is_scaler(arg.value, self.scope):
                # `def finish(s, o): s.step(o); s.update()`: `s` is the caller's scaler,
                # whatever the parameter is called (hostile pass 17)
                bound[_SCALER_PARAMETER + key] = key
        return bound

    def _self_alias_into(self, callee_scope, call: cst.Call) -> tuple[str, str] | None:
        """The alias of `self` inside a method called on the caller's own `self` (or
        `super()`): the same instance, named by the outermost class that holds it."""
        func = call.func
        caller = self.scope
        if callee_scope.cls is None or caller.cls is None or not isinstance(func, cst.Attribute):
            return None
        on_self = isinstance(func.value, cst.Name) and func.value.value == caller.self_name
        on_super = isinstance(func.value, cst.Call) and dotted(func.value.func) == "super"
        if not (on_self or on_super):
            return None
        outer = self.self_alias[1] if self.self_alias is not None else caller.cls.name
        own = callee_scope.cls.name
        return None if own == outer else (own, outer)

    @staticmethod
    def _decorator_disables_grad(expr: cst.BaseExpression, model) -> bool:
        target = expr.func if isinstance(expr, cst.Call) else expr
        return model.qualify(target) in NO_GRAD_CONTEXTS


# Library calls whose result owns the backward pass and its loss scaling: the engine
# `deepspeed.initialize(...)` returns first (its `.backward(loss)` scales in fp16), the
# loss apex's `amp.scale_loss(loss, optimizer)` yields (already scaled by apex).
_ENGINE_FACTORIES = ("deepspeed.initialize", "deepspeed.init_inference", "colossalai.initialize")
_SCALED_LOSS_CONTEXTS = ("apex.amp.scale_loss", "apex.amp.handle.scale_loss")


def library_owned(model) -> dict[str, str]:
    """Dotted names (anywhere in the module) bound to a library engine or a library-scaled
    loss, each with the library call that bound it: `model_engine, opt, _, _ =
    deepspeed.initialize(...)` gives `model_engine`, `with amp.scale_loss(loss, opt) as
    scaled_loss:` gives `scaled_loss`.  Computed once per module."""
    found = model.__dict__.get("_amplint_library_owned")
    if found is None:
        found = model.__dict__["_amplint_library_owned"] = _LibraryOwned(model).run()
    return found


class _LibraryOwned(cst.CSTVisitor):
    def __init__(self, model) -> None:
        self.model = model
        self.found: dict[str, str] = {}

    def run(self) -> dict[str, str]:
        walk(self.model.module, self)
        return self.found

    def _factory(self, value: cst.BaseExpression | None, names: tuple[str, ...]) -> str | None:
        if isinstance(value, cst.Subscript):  # `deepspeed.initialize(...)[0]`
            value = value.value
        if not isinstance(value, cst.Call):
            return None
        qual = self.model.qualify(value.func)
        return qual if qual in names else None

    def visit_Assign(self, node: cst.Assign) -> None:
        qual = self._factory(node.value, _ENGINE_FACTORIES)
        if qual is None:
            return
        for target in node.targets:
            t = target.target
            if isinstance(t, (cst.Tuple, cst.List)):
                t = t.elements[0].value if t.elements else None  # the engine comes first
            name = dotted(t) if t is not None else None
            if name is not None:
                self.found[name] = qual

    def visit_WithItem(self, node: cst.WithItem) -> None:
        qual = self._factory(node.item, _SCALED_LOSS_CONTEXTS)
        if qual is not None and node.asname is not None:
            name = dotted(node.asname.name)
            if name is not None:
                self.found[name] = qual


# Calls that hand back their argument unchanged, for a type checker's sake.
_IDENTITY_CALLS = {"typing.cast": 1, "typing_extensions.cast": 1, "typing.assert_type": 0}


def passed_through(expr: cst.BaseExpression, model) -> cst.BaseExpression:
    """`cast(torch.Tensor, scaler.scale(loss))` is `scaler.scale(loss)` at run time."""
    while isinstance(expr, cst.Call):
        position = _IDENTITY_CALLS.get(model.qualify(expr.func) or "")
        if position is None or len(expr.args) <= position:
            break
        expr = expr.args[position].value
    return expr


def module_label(model) -> str:
    """How a note names another module: its dotted name from its package root (`utils`)."""
    from pathlib import Path

    from amplint.project.layout import module_name

    try:
        return module_name(Path(model.path))
    except (OSError, ValueError):
        return Path(model.path).stem


def _identifiers(text: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def _assigned_names(node: cst.CSTNode) -> frozenset[str]:
    """Every name bound inside a loop (targets, loop variables, `self.x`'s last part)."""
    collector = _BoundNameCollector()
    walk(node, collector)
    return frozenset(collector.names)


class _BoundNameCollector(cst.CSTVisitor):
    # NB: at module level, not inside the function: `walk` plans its dispatch once per class.
    def __init__(self) -> None:
        self.names: set[str] = set()

    def _target(self, t) -> None:
        self.names.update(_names_in(t))

    def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
        self._target(n.target)

    def visit_AugAssign(self, n: cst.AugAssign) -> None:
        self._target(n.target)

    def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
        self._target(n.target)

    def visit_For(self, n: cst.For) -> None:
        self._target(n.target)

    def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
        self._target(n.target)


def _names_in(t: cst.CSTNode) -> list[str]:
    if isinstance(t, cst.Name):
        return [t.value]
    if isinstance(t, cst.Attribute):
        return [t.attr.value]
    if isinstance(t, (cst.Tuple, cst.List)):
        return [n for el in t.elements for n in _names_in(el.value)]
    if isinstance(t, cst.StarredElement):
        return _names_in(t.value)
    return []


# The value of an assignment fact that only forgets what was known of the name.
FORGET = object()


def _literal_assignment(s: cst.BaseSmallStatement) -> Fact | None:
    """`flag = True` / `flag = None` / `found = 0`: the fact a test of the name would then
    find (as `conditions.facts` states it), for a plain name and a literal value."""
    if not (isinstance(s, cst.Assign) and len(s.targets) == 1 and isinstance(s.targets[0].target, cst.Name)):
        return None
    name, value = s.targets[0].target.value, s.value
    if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
        return (name, value.value == "True")
    literal = literal_value(value)
    if literal is None or literal[0] == "bool":
        return None
    return (name, ("==", literal))


def _runs_forever(loop: cst.CSTNode) -> bool:
    """`while True:` / `while 1:`: the header never exits by its test."""
    if not isinstance(loop, cst.While):
        return False
    test = loop.test
    if isinstance(test, cst.Name):
        return test.value == "True"
    return isinstance(test, cst.Integer) and test.evaluated_value != 0


def _is_docstring(s: cst.CSTNode) -> bool:
    return (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _statements(body: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(body, cst.Module):
        return list(body.body)
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    if isinstance(body, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=body.body)]
    return list(getattr(body, "body", []))


def _merge_autocast(infos: list[AutocastInfo]) -> AutocastInfo:
    """Several possible contexts (`a if c else b`): enabled if any may be, dtypes united."""
    if len(infos) == 1:
        return infos[0]
    devices = {i.device for i in infos}
    dtypes: frozenset[str] | None = frozenset()
    for i in infos:
        dtypes = None if (dtypes is None or i.dtypes is None) else dtypes | i.dtypes
    enabled: bool | None = None if any(i.enabled is not False for i in infos) else False
    if all(i.enabled is True for i in infos):
        enabled = True
    return AutocastInfo(
        node=infos[0].node,
        device=devices.pop() if len(devices) == 1 else None,
        dtypes=dtypes,
        enabled=enabled,
        managed=any(i.managed for i in infos),
    )


class StepGraphs:
    """Graphs for every scope of a module, built on first use."""

    def __init__(self, model) -> None:
        self.model = model
        self._graphs: dict[int, StepGraph] = {}

    def graph(self, scope) -> StepGraph:
        g = self._graphs.get(id(scope))
        if g is None:
            g = StepGraph(scope)
            builder = _Builder(self.model, g)
            builder.build_body(scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node)
            self._graphs[id(scope)] = g
        return g

    def __iter__(self) -> Iterator[StepGraph]:
        for scope in self.model.scopes:
            yield self.graph(scope)

    def all_events(self) -> Iterator[Event]:
        for g in self:
            yield from g.events


def constructions_seen_from_importers(model, candidates, wanted_text, events_of):
    """(construction here, importer model, event) for each of `candidates` (this module's
    GradScaler constructions, one finding each) that an importer's analysis reaches through
    a call: the importers whose lowercased text passes `wanted_text` and names the function
    that builds it; `events_of(importer)` gives the importer's SCALER_NEW events worth asking
    about.  For each construction, the nearest importer's event reached through the fewest
    calls (the call nearest to it, not `main()` at module level).  A rule that reports a helper's own
    construction, not every call of it (AMP105, AMP204), asks this."""
    project = model.project
    by_function: dict[str, list[cst.Call]] = {}
    for c in candidates:
        by_function.setdefault(c.scope.name, []).append(c.call)
    if project is None or not by_function:
        return []
    here = os.path.abspath(model.path)
    words = {name.split(".")[-1].lower() for name in by_function}
    found: dict[int, tuple[cst.Call, object, Event]] = {}
    for path in project.importers_among(model.path, lambda text: wanted_text(text) and any(w in text for w in words)):
        other = project.model_at(path)
        if other is None:
            continue
        for ev in events_of(other):
            home = ev.scope.model
            if home is other or not ev.inlined or os.path.abspath(home.path) != here:
                continue
            mine = _same_construction(home, ev.node, by_function.get(ev.scope.name, ()), model)
            if mine is None:
                continue
            known = found.get(id(mine))
            # NB: the nearest importer's sighting stands; within it, the fewest calls.
            if known is None or (known[1] is other and len(ev.via) < len(known[2].via)):
                found[id(mine)] = (mine, other, ev)
    return list(found.values())


def _same_construction(home, node: cst.Call, candidates, model) -> cst.Call | None:
    """The construction of this module's `candidates` that `node` (found in `home`, a model
    of the same file that an importer's analysis used) stands for."""
    for call in candidates:
        if call is node:
            return call
    text = home.module.code_for_node(node)
    same = [call for call in candidates if model.module.code_for_node(call) == text]
    return same[0] if len(same) == 1 else None
