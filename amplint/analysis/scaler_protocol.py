"""GradScaler-protocol queries shared by AMP102-AMP108: guards, iterations, scaler identity.

The step graph is path-insensitive: in

    if use_amp: scaler.scale(loss).backward()
    else:       loss.backward()
    if use_amp: scaler.step(opt)
    else:       opt.step()

the plain `loss.backward()` "reaches" `scaler.step(opt)`.  Real training code is full
of this AMP/no-AMP split, so the protocol rules ask `exclusive(a, b)`: two events that
sit in opposite branches of one `if`, or under the same condition text with opposite
polarity (`if scaler is not None` / `else`, `if not use_amp`), never run in the same
pass.  Conditions are compared by their source text after normalising `not x`,
`x is None` and `x is not None`; a variable reassigned between two tests would fool
this, which we accept.

`iteration_paths` answers "can this event run in a loop iteration where that one does
not", which is what gradient accumulation bugs (AMP107) look like in the graph.
"""

from __future__ import annotations

import os
import re
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Callable

import libcst as cst

from amplint.analysis.conditions import consistent, contradicts, facts, negate
from amplint.analysis.names import dotted
from amplint.analysis.syntax import argument_for, call_arg, flag_text, sets_true
from amplint.analysis.walk import walk
from amplint.analysis.steps import Event, Kind, Point, StepGraph
from amplint.prefilter import Attr, Word


# Pre-filter for rules that need a GradScaler (bindings.is_scaler): without one of these a
# file can neither build a scaler (`GradScaler`), name one (`*scaler*`), nor use one by its
# methods: the receiver of `unscale_`/`get_scale`, of `.scale(x).backward()`, or of all of
# `.scale`/`.update`/`.step`. A tuple is a conjunction. NB: `Attr("scale")`, never the
# text `.scale(`: blanks and line breaks may sit between `.`, the name and `(`.
_SCALE, _BACKWARD, _UPDATE, _STEP = (Attr(w) for w in ("scale", "backward", "update", "step"))
# What `Bindings.scaler_keys` needs to find a scaler by its use alone (no GradScaler spelled).
SCALER_USE_TOKENS = (Word("unscale_"), Word("get_scale"), (_SCALE, _BACKWARD), (_SCALE, _UPDATE, _STEP))
SCALER_TOKENS = ("scaler", *SCALER_USE_TOKENS)


@dataclass(frozen=True)
class Guard:
    if_id: int  # id() of the `if` statement
    in_body: bool  # True in its body, False in its else/elif part
    cond: str  # normalised condition text (a fact's subject)
    holds: object  # what is known of it here: True/False, ("==", literal), ("!=", literal)


def _normalise(test: cst.BaseExpression, code: Callable[[cst.CSTNode], str]) -> list[tuple[str, object]]:
    """(condition text, value) facts a test establishes when it is true (analysis/conditions.py)."""
    return list(facts(test, code, True))


class _GuardCollector(cst.CSTVisitor):
    """For every call: the `if` branches around it, inside its own function."""

    def __init__(self, module: cst.Module, qualify=lambda expr: None) -> None:
        self.code = lambda n: module.code_for_node(n).strip()
        self.qualify = qualify
        self.stack: list[list[Guard]] = [[]]
        self.guards: dict[int, tuple[Guard, ...]] = {}
        # The text of every `if` test whose body holds the call, outermost first (whatever
        # its shape: `(i + 1) % k == 0 or last` establishes no fact, but it is periodic).
        self.test_stack: list[list[str]] = [[]]
        self.tests: dict[int, tuple[str, ...]] = {}
        self.block_sizes: dict[int, int] = {}
        self.next_statement: dict[int, cst.CSTNode] = {}
        # How many `try` bodies around a call (in its own function) have a handler that may
        # catch a RuntimeError; the calls with one.
        self.catching: list[int] = [0]
        self.caught: set[int] = set()
        # How many `try` bodies around a call (in its own function) have handlers of any
        # exception: a handler that `continue`s leaves the iteration half done.
        self.handled: list[int] = [0]
        self.in_handled_try: set[int] = set()
        # The last name of every callee called where a RuntimeError may be caught: a
        # function `unscale_and_clip` called inside `try: ... except RuntimeError` raises
        # into that handler.
        self.caught_callees: set[str] = set()
        self.function_stack: list[cst.FunctionDef] = []
        self.function_of: dict[int, cst.FunctionDef] = {}
        # The simple statement line each call is written on (an inlined event's own line).
        self.line: cst.SimpleStatementLine | None = None
        self.statement_of: dict[int, cst.SimpleStatementLine] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append([])
        self.test_stack.append([])
        # a decorator may wrap the function in a `try` (`@tolerant`, a retry on OOM)
        self.catching.append(int(any(_decorator_may_catch(d.decorator, self.qualify) for d in node.decorators)))
        self.handled.append(0)
        self.function_stack.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()
        self.test_stack.pop()
        self.catching.pop()
        self.handled.pop()
        self.function_stack.pop()

    def visit_Try_body(self, node: cst.Try) -> None:
        self.catching[-1] += _catches_runtime_error(node)
        self.handled[-1] += bool(node.handlers) or _finally_swallows(node)

    def leave_Try_body(self, node: cst.Try) -> None:
        self.catching[-1] -= _catches_runtime_error(node)
        self.handled[-1] -= bool(node.handlers) or _finally_swallows(node)

    # `with contextlib.suppress(RuntimeError):` catches as a `try` does, and so may a context
    # manager of the project (`@contextmanager def best_effort(): try: yield except ...`).
    def visit_With_body(self, node: cst.With) -> None:
        self.catching[-1] += _with_may_catch(node, self.qualify)
        self.handled[-1] += _suppresses(node)

    def leave_With_body(self, node: cst.With) -> None:
        self.catching[-1] -= _with_may_catch(node, self.qualify)
        self.handled[-1] -= _suppresses(node)

    def visit_TryStar_body(self, node) -> None:
        self.catching[-1] += _catches_runtime_error(node)

    def leave_TryStar_body(self, node) -> None:
        self.catching[-1] -= _catches_runtime_error(node)

    def _push(self, node: cst.If | cst.IfExp, in_body: bool) -> None:
        conds = _normalise(node.test, self.code)
        if in_body:
            self.stack[-1].extend(Guard(id(node), True, c, v) for c, v in conds)
        elif len(conds) == 1:
            c, v = conds[0]
            self.stack[-1].append(Guard(id(node), False, c, negate(v)))
        else:
            # `else` of `a and b` says nothing about `a` alone; keep the branch identity.
            self.stack[-1].append(Guard(id(node), False, "", False))

    def _pop(self, node: cst.If | cst.IfExp) -> None:
        frame = self.stack[-1]
        while frame and frame[-1].if_id == id(node):
            frame.pop()

    def visit_If_body(self, node: cst.If) -> None:
        self._push(node, True)
        self.test_stack[-1].append(self.code(node.test))

    def leave_If_body(self, node: cst.If) -> None:
        self._pop(node)
        self.test_stack[-1].pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self._push(node, False)

    def leave_If_orelse(self, node: cst.If) -> None:
        self._pop(node)

    # `scaler.scale(loss).backward() if scaler else loss.backward()`: the arms of a
    # conditional expression are branches too.
    def visit_IfExp_body(self, node: cst.IfExp) -> None:
        self._push(node, True)

    def leave_IfExp_body(self, node: cst.IfExp) -> None:
        self._pop(node)

    def visit_IfExp_orelse(self, node: cst.IfExp) -> None:
        self._push(node, False)

    def leave_IfExp_orelse(self, node: cst.IfExp) -> None:
        self._pop(node)

    def visit_Call(self, node: cst.Call) -> None:
        self.guards[id(node)] = tuple(self.stack[-1])
        if self.handled[-1]:
            self.in_handled_try.add(id(node))
        if self.catching[-1]:
            self.caught.add(id(node))
            callee = dotted(node.func)
            if callee is not None:
                self.caught_callees.add(callee.rsplit(".", 1)[-1])
        if self.test_stack[-1]:
            self.tests[id(node)] = tuple(self.test_stack[-1])
        if self.function_stack:
            self.function_of[id(node)] = self.function_stack[-1]
        if self.line is not None:
            self.statement_of[id(node)] = self.line

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.line = node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self.line = None

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._block(node.body)

    def visit_Module(self, node: cst.Module) -> None:
        self._block(node.body)

    def _block(self, body) -> None:
        for i, stmt in enumerate(body):
            self.block_sizes[id(stmt)] = len(body)
            if i + 1 < len(body):
                self.next_statement[id(stmt)] = body[i + 1]


class ScalerProtocol:
    """Per-module facts for the GradScaler rules; build with `protocol(model)`."""

    def __init__(self, model) -> None:
        self.model = model
        collector = _GuardCollector(model.module, model.qualify)
        walk(model.module, collector)
        self._guards = collector.guards
        self._tests = collector.tests
        self._block_sizes = collector.block_sizes
        self._next = collector.next_statement
        self._caught = collector.caught
        self._caught_callees = collector.caught_callees
        self._in_handled_try = collector.in_handled_try
        self._function_of = collector.function_of
        self._statement_of = collector.statement_of

    # --- guards --------------------------------------------------------------------------
    def guards(self, event: Event) -> tuple[Guard, ...]:
        outer = self._guards.get(id(event.anchor), ())
        if not event.inlined:
            return outer
        return outer + self._guards.get(id(event.node), ())

    def exclusive(self, a: Event, b: Event) -> bool:
        """The two events never run in the same pass through the function.  Besides this
        module's `if` statements, the conditions the step graph recorded at each event,
        those of helpers inlined from other modules included (`if args.precision == "amp":`
        in `train()` of train.py, reached from `main()` here)."""
        if _disjoint(self.guards(a), self.guards(b)):
            return True
        return bool(a.guards and b.guards) and not consistent(frozenset(a.guards), b.guards)

    def periodic(self, event: Event) -> bool:
        """The event runs only every few iterations, by the shape of an `if` around it: a
        modulo (`(i + 1) % accum == 0`) or a test that names accumulation
        (`if step == accum_steps:`, `if not self.accumulating:`).  What gradient
        accumulation looks like, as opposed to a step skipped for a reason of its own
        (a non-finite loss, a warm-up gate)."""
        calls = (event.anchor, event.node) if event.inlined else (event.anchor,)
        return any(_PERIODIC.search(t) for c in calls for t in self._tests.get(id(c), ()))

    def periodic_tests(self, event: Event) -> set[str]:
        """The texts of the accumulation tests (`periodic`) around the event."""
        calls = (event.anchor, event.node) if event.inlined else (event.anchor,)
        return {t for c in calls for t in self._tests.get(id(c), ()) if _PERIODIC.search(t)}

    def exclusive_calls(self, a: cst.Call, b: cst.Call) -> bool:
        """Two calls of this module's code that sit in branches that never both run."""
        return _disjoint(self._guards.get(id(a), ()), self._guards.get(id(b), ()))

    def removable(self, statement: cst.CSTNode | None) -> bool:
        """Deleting this statement leaves its block non-empty (module level is always fine)."""
        if statement is None:
            return False
        return self._block_sizes.get(id(statement), 2) > 1

    def caught(self, event: Event) -> bool:
        """The event runs inside a `try` whose handlers may catch the RuntimeError that a
        protocol call raises (`unscale_` twice, `step` without `update`): deleting or adding
        such a call changes which branch runs."""
        if any(id(c) in self._caught for c in (event.anchor, event.node)):
            return True
        # Its function is called, somewhere in the module, where the error is caught (one
        # level of callers; a caller in another module is not seen).
        function = self._function_of.get(id(event.node))
        return function is not None and function.name.value in self._caught_callees

    def raises_uncaught(self, event: Event) -> bool:
        """Positive evidence that the RuntimeError a protocol call raises at `event` ends
        the program: nothing around it may catch it, and its function is reached only by
        direct calls (within this module, up to four callers deep, or from the module level
        of a script no project file imports) that nothing catches either.  A function that is decorated, a generator or a
        coroutine, referenced other than by a call (a callback, a thread's target), called
        nowhere in this module (a framework's hook), or whose name another project file
        mentions (a caller there is not seen) gives no such evidence.  Deleting a call that
        raises is then a change from a crash to a run, never from one handled path to
        another."""
        if event.inlined or self.caught(event):
            return False
        return self._uncaught_from(self._function_of.get(id(event.node)), 0, frozenset())

    def nothing_handles(self, event: Event) -> bool:
        """Positive evidence that no exception at `event`, of any type, is handled: nothing
        around it handles one (a `try` with handlers, a `finally` that leaves, `suppress`, a
        catching context manager), nor around any of its callers (as `raises_uncaught`).
        Code between an inserted call and the one that completes it (AMP101's `unscale_`
        and `step`) may then raise only into the end of the program, as the code as written
        would."""
        if event.inlined or self.caught(event) or self.in_handled_try(event):
            return False
        return self._uncaught_from(self._function_of.get(id(event.node)), 0, frozenset(), any_exception=True)

    def _uncaught_from(self, function: cst.FunctionDef | None, depth: int, seen: frozenset[int],
                       any_exception: bool = False) -> bool:
        if function is _UNKNOWN_CALLER or self._rewires_names():
            return False  # a lambda or generator caller; `globals()[name] = wrap(...)`
        if function is None:
            # module-level code: an uncaught error ends the script, unless another module
            # imports this one (`try: import job except RuntimeError: ...`)
            project = self.model.project
            path = str(self.model.path)
            if path[:1] == "<" or project is None or not os.path.isfile(path):
                return True  # a buffer or stdin: no file that anything could import or run
            return not project.may_be_imported(path) and not project.may_be_run_in_process(path)
        if depth > 4 or id(function) in seen or function.decorators or function.asynchronous:
            return False
        if _contains_yield(function):
            return False
        if self._in_decorated_class(function):
            return False  # a class decorator may wrap every method
        name = function.name.value
        # A module-level function is reached by its name (an attribute `x.step()` of the same
        # spelling is another object's method); a method by attribute (`self.step()`), and by
        # its name only where a class body calls it.
        by_name, by_attribute = self._references()
        method = any(function in cls.methods.values() for cls in self.model.classes.values())
        references = (by_attribute.get(name, []) + by_name.get(name, [])) if method else by_name.get(name)
        if not references or not self.only_here(name):
            return False
        for call, caller in references:
            if call is None or id(call) in self._caught or (any_exception and id(call) in self._in_handled_try):
                return False
            if not self._uncaught_from(caller, depth + 1, seen | {id(function)}, any_exception):
                return False
        return True

    def _rewires_names(self) -> bool:
        """The module reaches its names dynamically (`globals()`, `exec`, `eval`, `setattr`
        on a module): a call by name may run something else."""
        code = self.model.text
        return any(w in code for w in ("globals()", "exec(", "eval(", "sys.modules"))

    def _in_decorated_class(self, function: cst.FunctionDef) -> bool:
        for cls in self.model.classes.values():
            if function in cls.methods.values() and cls.node.decorators:
                return True
        return False

    def only_here(self, name: str) -> bool:
        """No project file that imports this module mentions `name`: nothing else can call
        its functions or reach its objects by that name (a file checked without a project
        may be imported by anything; a buffer or stdin by nothing)."""
        project = self.model.project
        path = str(self.model.path)
        if path[:1] == "<" or not os.path.isfile(path):
            return True  # a buffer: no file that anything could import
        if project is None:
            return False
        return not project.named_by_importers(path, name.lower())

    def _references(self) -> dict[str, list[tuple[cst.Call | None, cst.FunctionDef | None]]]:
        """Each name's uses in the module (as a plain name or an attribute's last part):
        the call it is the callee of (None for any other use), and the function it is in."""
        cached = getattr(self, "_reference_map", None)
        if cached is None:
            finder = _References()
            walk(self.model.module, finder)
            cached = self._reference_map = (finder.found, finder.attributes)
        return cached

    def flag_set_after(self, event: Event, flag: str, later: Event | None = None) -> bool:
        """A later statement of the event's own block sets `flag = True` (`scaler.unscale_(opt);
        unscaled = True`): a call guarded by `if not unscaled:` cannot follow it.  For an
        event inlined from a helper (`ensure_unscaled(state)`), the helper's own block; then
        the `later` event, inlined from the same line, must see the same flag object (the
        same argument for a parameter the flag belongs to)."""
        statement = event.statement
        if event.inlined:
            statement = self._statement_of.get(id(event.node))
            if later is None or not self._same_flag_object(event, later, flag):
                return False
        try:
            flag = flag_text(cst.parse_expression(flag))  # a guard's text: `st["unscaled"]`
        except cst.ParserSyntaxError:
            return False
        if flag is None:
            return False
        stmt = self.next_statement(statement)
        while stmt is not None:
            if sets_true(stmt, flag):
                return True
            stmt = self.next_statement(stmt)
        return False

    def _same_flag_object(self, first: Event, later: Event, flag: str) -> bool:
        """Both events run the same helper line, and the flag's owner is the same object in
        both calls: a module-level name, or a parameter given the same name twice."""
        if first.node is not later.node or not first.through or not later.through:
            return False
        helper = first.scope
        root = re.split(r"[.\[]", flag, maxsplit=1)[0]
        if root not in helper.params:
            return True  # a global or a closure's name: one object
        a = argument_for(first.through[-1][0], helper, root) if root != helper.self_name else None
        b = argument_for(later.through[-1][0], helper, root) if root != helper.self_name else None
        if root == helper.self_name:
            a, b = (c.func.value if isinstance(c.func, cst.Attribute) else None for c in (first.through[-1][0], later.through[-1][0]))
        text = dotted(a) if a is not None else None
        return text is not None and text == (dotted(b) if b is not None else None) and len(first.through) == len(later.through) == 1 \
            and not self.rebound_between(first.through[0][1], first.anchor, later.anchor, text)

    def in_handled_try(self, event: Event) -> bool:
        """The event runs inside a `try` body that has handlers (of any exception): an
        exception after it may end the iteration without the rest of the protocol."""
        return any(id(c) in self._in_handled_try for c in (event.anchor, event.node))

    def alone_on_its_line(self, event: Event) -> bool:
        """The event's statement is one simple statement of a block of this module (not
        `a(); b()`, not the body of a one-line `if x: b()`): text may go before it."""
        stmt = event.statement
        return (not event.inlined and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and id(stmt) in self._block_sizes)

    def next_statement(self, statement: cst.CSTNode | None) -> cst.CSTNode | None:
        """The statement after this one in the same block, if any."""
        return None if statement is None else self._next.get(id(statement))

    # --- scalers -------------------------------------------------------------------------
    def scaler_disabled(self, key: str | None) -> bool:
        """Every construction assigned to this key is a literal `enabled=False` scaler."""
        if key is None:
            return False
        b = self.model.bindings
        found = [
            c
            for c in b.scaler_constructions
            if c.target is not None and b.key(cst.parse_expression(c.target), c.scope) == key
        ]
        return bool(found) and all(c.enabled is False for c in found)

    def scaler_off_where(self, key: str | None, *events: Event) -> bool:
        """On every path that runs all of `events`, the scaler of `key` is disabled: each of
        its constructions is literally `enabled=False`, or its `enabled=` expression is false
        where the events run (`GradScaler(enabled=use_amp)` seen from under `if not use_amp:`,
        `enabled=dtype == torch.float16` from under `if dtype == torch.bfloat16:`)."""
        if key is None:
            return False
        b = self.model.bindings
        found = [
            c
            for c in b.scaler_constructions
            if c.target is not None and b.key(cst.parse_expression(c.target), c.scope) == key
        ]
        if not found:
            return False
        known = [(g.cond, g.holds) for e in events for g in self.guards(e) if g.cond]
        for c in found:
            if c.enabled is False:
                continue
            expr = call_arg(c.call, 4 if c.qualname.startswith(("torch.cuda", "torch.cpu")) else 5, "enabled")
            if expr is None or c.enabled is True:
                return False
            when_on = facts(expr, lambda n, m=c.scope.model.module: m.code_for_node(n).strip(), True)
            if not when_on or not any(contradicts(f, k) for f in when_on for k in known):
                return False
        return True

    def key(self, event: Event, graph: StepGraph, which: str = "scaler") -> str | None:
        """The event's scaler (or optimizer) key as the analysed function names it.

        An event inlined from `def optimizer_step(scaler, optimizer)` carries the
        helper's parameter keys; through the call's arguments they become the caller's
        `scaler` and `optimizer`.  Unknown (None) when the argument is not a name.
        """
        key = getattr(event, which)
        if key is None or not event.inlined or len(event.via) != 1:
            return key
        text = self.model.bindings.text_of(key) or ""
        head, _, rest = text.partition(".")
        callee = event.scope
        if head not in callee.params or head == callee.self_name:
            return key
        arg = argument_for(event.anchor, callee, head)
        arg_text = dotted(arg)
        if arg_text is None:
            return None
        full = arg_text + (f".{rest}" if rest else "")
        return self.model.bindings.key(cst.parse_expression(full), graph.scope)

    @property
    def uses_enabled_scaler(self) -> bool:
        """The module trains with a scaler that may be enabled: it scales a backward,
        unscales, steps or updates through one.  A factory that only builds and returns
        a GradScaler does not count."""
        for graph in self.model.steps:
            for e in graph.events:
                uses = e.kind in (Kind.SCALER_STEP, Kind.UNSCALE, Kind.UPDATE) or (e.kind is Kind.BACKWARD and e.scaled)
                if uses and not self.scaler_disabled(e.scaler):
                    return True
        return False

    def rebound_between(self, scope, start: cst.Call, end: cst.Call, text: str | None) -> bool:
        """Whether the dotted name `text` may denote another object at `end` than at `start`
        (two calls of the function of `scope`): some binding of it, or of a name it is an
        attribute of, lies between them in the source (`optimizer = o2`, `for optimizer in`,
        `self.opt = ...`), or the order cannot be told.  Unknown text: True."""
        if text is None:
            return True
        root = scope.node
        finder = _BindingsBetween(start, end)
        if isinstance(root, cst.FunctionDef):
            walk(root.body, finder)
        else:
            walk(root, finder)
        if finder.state != 2:
            return True  # NB: not both found in this order (the same statement, another function)
        if any(t == text or text.startswith(t + ".") for t in finder.names()):
            return True
        return self._call_may_rebind(finder.calls, text)

    def calls_between(self, scope, start: cst.Call, end: cst.Call) -> list[cst.Call] | None:
        """The calls after `start` and before `end` in the function of `scope`, in source
        order; None when the two are not found in that order."""
        finder = _BindingsBetween(start, end)
        walk(scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node, finder)
        return finder.calls if finder.state == 2 else None

    def _call_may_rebind(self, calls: list[cst.Call], text: str) -> bool:
        """A call between the two may rebind `text` out of sight: `self.refresh()` or
        `reset(self)` can assign `self.scaler`; a function that declares `global scaler`
        can rebind the module's `scaler`.  Calls on another attribute (`self.model.train()`,
        `self.log.info(...)`) and on `text` itself are taken not to."""
        root, dot, _ = text.partition(".")
        declared_global = root in self._globals_declared()
        for call in calls:
            callee = dotted(call.func) or ""
            if dot and callee.count(".") == 1 and callee.startswith(root + ".") and not callee.startswith(text + "."):
                return True  # `self.refresh()`
            if dot and any(isinstance(a.value, cst.Name) and a.value.value == root for a in call.args):
                return True  # `reset(self)`
            if declared_global and "." not in callee:
                return True  # `refresh()` where some function says `global scaler`
        return False

    def _globals_declared(self) -> frozenset[str]:
        """Names some `global` statement of the module declares (computed once)."""
        cached = getattr(self, "_global_names", None)
        if cached is None:
            found: set[str] = set()

            class _Globals(cst.CSTVisitor):
                def visit_Global(self, node: cst.Global) -> None:
                    found.update(n.name.value for n in node.names)

            walk(self.model.module, _Globals())
            cached = self._global_names = frozenset(found)
        return cached

    @staticmethod
    def same(a: str | None, b: str | None) -> bool:
        """Keys name the same object, or one of them is unknown."""
        return a is None or b is None or a == b


class _BindingsBetween(cst.CSTVisitor):
    """The dotted names bound, in source order, after the call `start` and before `end`."""

    def __init__(self, start: cst.Call, end: cst.Call) -> None:
        self.start, self.end = start, end
        self.state = 0  # 0 before start, 1 between, 2 at or after end
        self.bound: set[str] = set()
        self.calls: list[cst.Call] = []  # the calls between, in source order
        # `for opt in optimizers:` loops open here, and those around `start` and `end`.
        self.fors: list[tuple[cst.For, str]] = []
        self.start_fors: list[tuple[cst.For, str]] = []
        self.end_fors: list[tuple[cst.For, str]] = []
        self.loop_bound: list[tuple[cst.For, str, set[str]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if node is self.start and self.state == 0:
            self.state = 1
            self.start_fors = list(self.fors)
        elif node is self.end and self.state == 1:
            self.state = 2
            self.end_fors = list(self.fors)
        elif self.state == 1:
            self.calls.append(node)

    def names(self) -> set[str]:
        """What is bound between, less the variable of a loop around `end` that walks the
        same collection as a loop around `start` (`for opt in optimizers:` twice: each
        pass names the same optimizers again)."""
        bound = set(self.bound)
        again = {shape for _, shape in self.start_fors}
        around_end = {id(node) for node, _ in self.end_fors}
        for node, shape, names in self.loop_bound:
            collection = dotted(node.iter)
            same = (id(node) in around_end and shape in again and collection is not None
                    and not any(collection == t or collection.startswith(t + ".") for t in self.bound))
            if not same:
                bound |= names
        return bound

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self.state == 1:
            self.bound.add(node.name.value)
        return False  # another scope; NB: `nonlocal` rebinding inside is not followed

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self.state == 1:
            self.bound.add(node.name.value)
        return False

    def _target(self, t: cst.CSTNode | None) -> None:
        if self.state != 1 or t is None:
            return
        if isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                self._target(el.value)
        elif isinstance(t, cst.StarredElement):
            self._target(t.value)
        else:
            name = dotted(t)
            if name is not None:
                self.bound.add(name)
            elif isinstance(t, cst.Subscript):
                self._target(t.value)  # `opts[0] = o2`: what `opts` holds changed

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        shape = f"{dotted(node.target)} in {dotted(node.iter)}"
        if self.state == 1:
            saved, self.bound = self.bound, set()
            self._target(node.target)
            self.loop_bound.append((node, shape, self.bound))
            self.bound = saved
        self.fors.append((node, shape))

    def leave_For(self, original_node: cst.For) -> None:
        self.fors.pop()

    def visit_CompFor(self, node: cst.CompFor) -> None:
        pass  # a comprehension's variable is its own scope

    def visit_AsName(self, node: cst.AsName) -> None:
        self._target(node.name)

    def visit_Del(self, node: cst.Del) -> None:
        self._target(node.target)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if self.state == 1:
            name = dotted(node.asname.name) if node.asname is not None else dotted(node.name)
            if name is not None:
                self.bound.add(name.split(".")[0])

    def visit_Global(self, node: cst.Global) -> None:
        if self.state == 1:
            self.bound.update(n.name.value for n in node.names)


_UNKNOWN_CALLER = "unknown"


class _References(cst.CSTVisitor):
    """Where each name is used: as the callee of a call (`train(...)`, `self.train_step()`),
    or otherwise (`Thread(target=train)`, `callbacks.append(self.step)`); a function's own
    `def` is no use."""

    def __init__(self) -> None:
        # uses as a plain name (`train(...)`), and as an attribute's last part (`self.train_step()`)
        self.found: dict[str, list[tuple[cst.Call | None, cst.FunctionDef | None]]] = {}
        self.attributes: dict[str, list[tuple[cst.Call | None, cst.FunctionDef | None]]] = {}
        self.attribute_names: set[int] = set()
        self.callees: dict[int, cst.Call] = {}
        self.functions: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)
        self.callees[id(node.name)] = None  # the definition's own name: skipped below

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()

    # A call inside a lambda or a lazily run comprehension runs where that is called or
    # consumed, which is not known: its caller is "unknown" (None), never the module level.
    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.functions.append(_UNKNOWN_CALLER)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.functions.pop()

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self.functions.append(_UNKNOWN_CALLER)

    def leave_GeneratorExp(self, original_node: cst.GeneratorExp) -> None:
        self.functions.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        self.callees[id(func.attr if isinstance(func, cst.Attribute) else func)] = node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._use(node.attr, self.attributes)
        self.attribute_names.add(id(node.attr))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.attribute_names:  # `x.step`'s `step` is counted above
            self._use(node, self.found)

    def _use(self, name: cst.Name, table) -> None:
        if id(name) in self.callees and self.callees[id(name)] is None:
            return
        function = self.functions[-1] if self.functions else None
        table.setdefault(name.value, []).append((self.callees.get(id(name)), function))


def _contains_yield(function: cst.FunctionDef) -> bool:
    """The function's own body yields (nested definitions are their own)."""

    class _Yields(cst.CSTVisitor):
        found = False

        def visit_Yield(self, node: cst.Yield) -> None:
            self.found = True

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

    finder = _Yields()
    walk(function, finder)
    return finder.found


# Exceptions whose handler does not catch a plain RuntimeError (RuntimeError's subclasses among them).
_NOT_RUNTIME_ERROR = frozenset({
    "ValueError", "KeyError", "TypeError", "IndexError", "AttributeError", "ImportError", "ModuleNotFoundError",
    "OSError", "IOError", "FileNotFoundError", "PermissionError", "StopIteration", "KeyboardInterrupt",
    "AssertionError", "ZeroDivisionError", "ArithmeticError", "LookupError", "NameError", "NotImplementedError",
    "RecursionError", "MemoryError", "OverflowError", "UnicodeError", "UnicodeDecodeError", "SystemExit",
    "GeneratorExit", "FloatingPointError", "EOFError", "TimeoutError", "ConnectionError", "OutOfMemoryError",
    "Warning", "UserWarning",
})


def _finally_swallows(node) -> bool:
    """A `finally:` that leaves by `return`, `break` or `continue` discards the exception in
    flight: it catches everything."""
    if getattr(node, "finalbody", None) is None:
        return False
    finder = _Leaves()
    walk(node.finalbody, finder)
    return finder.found


class _Leaves(cst.CSTVisitor):
    found = False

    def visit_Return(self, node: cst.Return) -> None:
        self.found = True

    def visit_Break(self, node: cst.Break) -> None:
        self.found = True

    def visit_Continue(self, node: cst.Continue) -> None:
        self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _catches_runtime_error(node) -> int:
    """1 when a handler of the `try` may catch RuntimeError: bare `except:`, `Exception`,
    `BaseException`, `RuntimeError`, a tuple holding one, or a name we cannot place; or
    its `finally:` leaves by `return`/`break`/`continue`."""
    if _finally_swallows(node):
        return 1
    for handler in node.handlers:
        kind = handler.type
        if kind is None:
            return 1
        kinds = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
        for k in kinds:
            name = dotted(k)
            if name is None or name.split(".")[-1] not in _NOT_RUNTIME_ERROR:
                return 1
    return 0


def _suppresses(node: cst.With) -> int:
    """1 when the `with` enters `suppress(...)` of any exception."""
    return int(any((dotted(item.item.func) or "").rsplit(".", 1)[-1] == "suppress"
                   for item in node.items if isinstance(item.item, cst.Call)))


def _with_may_catch(node: cst.With, qualify) -> int:
    """1 when a context the `with` enters may swallow a RuntimeError: `contextlib.suppress`
    of one (or of something we cannot place), or any context manager that is not torch's,
    `open` or `nullcontext` (a project's `@contextmanager` may `try: yield except: ...`)."""
    for item in node.items:
        ctx = item.item
        func = ctx.func if isinstance(ctx, cst.Call) else ctx
        name = dotted(func) or ""
        qual = qualify(func) or name
        if name.rsplit(".", 1)[-1] == "suppress":
            if any((dotted(a.value) or "?").split(".")[-1] not in _NOT_RUNTIME_ERROR for a in ctx.args):
                return 1
            continue
        if qual.split(".")[0] == "torch" or qual in _CONTEXTS_THAT_RERAISE or name.rsplit(".", 1)[-1] in _CONTEXT_METHODS_THAT_RERAISE:
            continue
        return 1
    return 0


def _decorator_may_catch(decorator: cst.BaseExpression, qualify) -> bool:
    """A decorator that may run the function inside a `try` of its own: any but torch's, the
    builtins' (`staticmethod`, `property` ...) and `functools`' caches."""
    func = decorator.func if isinstance(decorator, cst.Call) else decorator
    qual = qualify(func) or dotted(func) or ""
    return not (qual.split(".")[0] == "torch" or qual in _DECORATORS_THAT_RERAISE)


# Context managers and decorators known to let a RuntimeError through.
# NB: not `contextlib.ExitStack`, whose pushed callbacks may suppress (`stack.push(lambda *e: True)`).
_CONTEXTS_THAT_RERAISE = frozenset({"open", "contextlib.nullcontext", "nullcontext",
                                     "warnings.catch_warnings", "tempfile.TemporaryDirectory", "threading.Lock"})
# `with model.no_sync():`, `with accelerator.accumulate(model):`, `with ema.average_parameters():` ...
_CONTEXT_METHODS_THAT_RERAISE = frozenset({"no_sync", "accumulate", "autocast", "no_grad", "enable_grad",
                                           "inference_mode", "record_function", "profile", "join"})
_DECORATORS_THAT_RERAISE = frozenset({"staticmethod", "classmethod", "property", "functools.wraps", "functools.lru_cache",
                                       "functools.cache", "functools.cached_property", "abc.abstractmethod",
                                       "typing.overload", "dataclasses.dataclass", "contextlib.contextmanager"})


# A modulo, or a word of gradient accumulation, in an `if` test (see ScalerProtocol.periodic).
_PERIODIC = re.compile(r"%|accum|accu_|_acc\b|grad_acc|micro_?(?:batch|step)|sync_grad|is_update_step|update_step|optim(?:izer)?_step", re.I)


def _disjoint(ga: tuple[Guard, ...], gb: tuple[Guard, ...]) -> bool:
    """Opposite branches of one `if`, or conditions that contradict (x / not x, x == "a" / x == "b")."""
    for x in ga:
        for y in gb:
            if x.if_id == y.if_id and x.in_body != y.in_body:
                return True
            if x.cond and contradicts((x.cond, x.holds), (y.cond, y.holds)):
                return True
    return False


_CACHE: "weakref.WeakKeyDictionary[object, ScalerProtocol]" = weakref.WeakKeyDictionary()


def protocol(model) -> ScalerProtocol:
    found = _CACHE.get(model)
    if found is None:
        found = _CACHE[model] = ScalerProtocol(model)
    return found


# --- paths over a step graph ------------------------------------------------------------


def search(
    start: Point | list[Point],
    *,
    found: Callable[[Point], bool],
    blocked: Callable[[Point], bool] = lambda p: False,
    onward: Callable[[Point], list[Point]] = lambda p: p.succ,
) -> bool:
    """Breadth-first from the successors of `start`: is a `found` point reachable
    without entering a `blocked` one?  (A point that is both counts as found.)
    `onward(p)` is where a path may go from `p` (its successors unless told otherwise:
    `Loop.exits` at a header keeps a path within one iteration)."""
    seen: set[int] = set()
    queue = deque(start.succ if isinstance(start, Point) else start)
    while queue:
        p = queue.popleft()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if found(p):
            return True
        if blocked(p):
            continue
        queue.extend(onward(p))
    return False


def event_is(p: Point, pred: Callable[[Event], bool]) -> bool:
    return p.event is not None and pred(p.event)


def runs_without(graph: StepGraph, loop, event: Event, avoid: Callable[[Event], bool]) -> bool:
    """Within `loop`, some iteration runs `event` and none of the `avoid` events:
    a path header -> event -> header that passes no avoided event (a `for` loop over
    collections whose body has one counts as running it: `StepGraph.runs_in_loop`)."""
    target = graph.point(event)
    # An iteration that an exception cut short and a handler swallowed is not "some
    # iteration" of training: `except RuntimeError: found_oom = 1` then the update.
    blocked = lambda p: p.handler or event_is(p, avoid) or (p is not loop.header and graph.runs_in_loop(p, avoid))  # noqa: E731
    before = graph.search(loop.header, found=lambda p: p is target, blocked=blocked)
    after = graph.search(target, found=lambda p: p is loop.header, blocked=blocked)
    return before and after


def training_loop(graph: StepGraph, event: Event):
    """The innermost loop of `graph` around `event` that also runs a backward pass.

    `for opt in optimizers: scaler.step(opt)` is a loop, but not an iteration of
    training; the batch loop around it is.  None when the graph has no such loop.
    """
    backward_loops = {id(loop) for e in graph.of_kind(Kind.BACKWARD) for loop in e.loops}
    for loop in reversed(graph.loops):
        if loop in event.loops and id(loop) in backward_loops and _loops_back(graph, loop, event):
            return loop
    return None


def _loops_back(graph: StepGraph, loop, event: Event) -> bool:
    """After `event`, the loop can start another iteration.  `while True: try: ...;
    scaler.step(opt) ... except OOM: shrink the micro-batch; continue ... break` is a
    retry loop: every path from the step leaves it, so it is not the step's iteration
    (a path through an `except` handler is the retry of a failed step, not another one)."""
    return graph.iteration_through(loop, graph.point(event), blocked=lambda p: p.handler)


def batch_loop(event: Event):
    """The innermost loop around `event` that is not a loop over optimizers (`for opt in
    optimizers: scaler.step(opt)`): the loop whose iterations are training steps."""
    for loop in reversed(event.loops):
        node = loop.node
        if isinstance(node, cst.For) and _OPTIMIZERS.search(
            f"{dotted(node.target) or ''} {dotted(node.iter) or ''}"
        ):
            continue
        return loop
    return None


_OPTIMIZERS = re.compile(r"(?:^|[._ ])opt(?:im\w*)?s?(?:$|[._ ])|optimi[sz]er", re.I)


def before_training(backward: Event, step: Event) -> bool:
    """`backward` runs outside the batch loop that runs `step`, so before that loop
    starts (a gradient-based initialisation, a saliency or Fisher estimate, a probe): its
    gradients are not the ones this loop's steps apply."""
    loop = batch_loop(step)
    return loop is not None and loop not in backward.loops


def in_iteration_reaches(graph: StepGraph, event: Event, pred: Callable[[Event], bool]) -> bool:
    """From `event`, a `pred` event is reachable before control returns to the header of
    the training loop holding `event` (or anywhere after it, outside loops)."""
    loop = training_loop(graph, event)
    header = loop.header if loop is not None else None
    return graph.search(
        graph.point(event),
        found=lambda p: event_is(p, pred) or (p is not header and graph.runs_in_loop(p, pred)),
        blocked=lambda p: p is header,
    )


def text(expr: cst.BaseExpression | None) -> str | None:
    return dotted(expr)
