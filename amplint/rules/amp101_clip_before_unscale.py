"""AMP101 clip-before-unscale."""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.bindings import Bindings
from amplint.analysis.grad_norms import clips_nothing, is_loss_scale
from amplint.analysis.names import dotted
from amplint.analysis.plain_scaler import plain_scaler
from amplint.analysis.quiet_window import quiet_between
from amplint.analysis.syntax import call_arg
from amplint.analysis.scaler_protocol import event_is, protocol, search, training_loop
from amplint.analysis.steps import SCALING_LIBRARY_WORDS, Kind
from amplint.diagnostics import Applicability
from amplint.prefilter import Attr, CodePattern
from amplint.rules._base import FixAvailability, InsertBefore, Rule

# After any of these the gradients are no longer the scaled ones this backward produced:
# unscale_ divided them (or the library did: `accelerator.unscale_gradients()`,
# `accelerator.clip_grad_norm_`), step/update ended the iteration, zero_grad cleared them,
# and a new scaled backward starts its own story.
_UNSCALES = (Kind.UNSCALE, Kind.MANAGED_UNSCALE)
_ENDS_SCALED_WINDOW = (*_UNSCALES, Kind.SCALER_STEP, Kind.UPDATE, Kind.ZERO_GRAD)
# A library's own backward (`accelerator.backward`, `self.manual_backward`) is also unscaled
# in the step of the optimizer the library wraps.
_ENDS_MANAGED_WINDOW = (*_ENDS_SCALED_WINDOW, Kind.OPT_STEP)
# A library backward written on a receiver that names the library (`self.accelerator.backward`,
# steps.SCALING_LIBRARY_WORDS), in lowercased code: the necessary condition of `scales_loss`.
_LIBRARY_BACKWARD = CodePattern(
    re.compile(rf"(?:{'|'.join(SCALING_LIBRARY_WORDS)})[a-z0-9_]*(?:[\s\\]*\.[\s\\]*[a-z0-9_]+)*[\s\\]*\.[\s\\]*backward(?![a-z0-9_])"),
    literal="backward",
)


class ClipBeforeUnscale(Rule):
    """
    ## What it does
    Flags gradient clipping (`clip_grad_norm_`, `clip_grad_value_`,
    `clip_grads_with_norm_`, FSDP's `model.clip_grad_norm_`, under any alias) that can
    run after `scaler.scale(loss).backward()` and before `scaler.unscale_(optimizer)`.
    A library's backward that scales in float16 mixed precision counts too:
    `accelerator.backward(loss)` and `fabric.backward(loss)` until their own clip or
    `accelerator.unscale_gradients()`, Lightning's `self.manual_backward(loss)` until
    `optimizer.step()` (`self.clip_gradients` does not unscale in manual optimization).
    A clip where the scaler's `enabled=` flag is false (`GradScaler(enabled=flag)` and a
    clip under `if not flag:`) sees unscaled gradients, and so does a clip after
    `unscale_` of a scaler chosen beside a project's stand-in (`GradScaler() if use_amp
    else DummyGradScaler()`): neither is reported.
    A clip with an infinite threshold (`max_norm=inf`, also passed in by the caller of
    the helper that clips) clips nothing: it only measures, and AMP112 reports it.

    ## Why is this bad?
    Until `unscale_` runs, every `.grad` holds the gradient times the loss scale
    (65536 by default). The clipping threshold is compared with that inflated norm,
    so clipping fires on every step and shrinks the update by the scale factor, or
    (with `clip_grad_value_`) clamps gradients to a tiny fraction of their size. The
    loss still goes down, just worse; nothing raises.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: inserts `scaler.unscale_(optimizer)` before the clip for the optimizer that
    the following `scaler.step` of this iteration receives. `step` would unscale it
    anyway, so unscaling first changes only what the clip sees. A clip followed by the
    steps of two optimizers gets no fix: they may share a parameter, whose gradient two
    `unscale_` calls before the first step would divide twice. It is offered only
    when every one of those steps runs on every path from the clip, in the same
    function and loop, and nothing unscales this scaler's optimizers in the iteration
    already (`unscale_` twice raises); alternating steps (a GAN that steps one
    optimizer per iteration) get no fix, nor does a clip that shares its line with
    other statements (`scaler.scale(loss).backward(); clip_grad_norm_(...)`), an
    optimizer name bound again between the clip and the step (`optimizer = o2`: the
    clip's `optimizer` is another object), also out of sight (a method called on the
    same object between them: `self.rebuild_optimizer()` may assign `self.opt`), or a
    clip inside a `try` with handlers. Between the clip and the steps there must be
    nothing that can raise or suspend (only names bound to names and constants, `pass`,
    and `if` tests of those; no call, attribute, `yield`, nor the end of a `with`,
    `try` or loop), the clip's own arguments may call only `<module>.parameters()`, and
    the clip must not raise on non-finite gradients (`error_if_nonfinite=True`,
    `**kwargs`). Besides, nothing may handle an exception there: no `try` with handlers,
    `finally` that leaves, `suppress` or project context manager around the clip or
    around any call of its function (up to four callers, a script nothing imports or
    runs by path), so that an exception in the window ends the program as it would have;
    the clip must be torch's (`torch.nn.utils.clip_grad_*`, not a project's or a
    wrapper's method, which may unscale itself); the scaler must be used only through
    its methods by its name (no `unscale = scaler.unscale_`, no `getattr`); and each
    optimizer a plain name or an attribute the class assigns (not a property, which may
    give another object when read again). Otherwise an exception after the inserted
    `unscale_` that any caller handles, or a generator abandoned at a `yield`, leaves
    the optimizer unscaled, and the next iteration's `unscale_` raises where the code
    as written ran on. It is still wrong if an optimizer unscales internally or a
    caller already unscaled.

    ## Runtime confirmation
    `amplint verify` reads the scaler's per-optimizer stage at the clip call: READY
    with a scale != 1 means the gradients were still scaled. It reports the norm seen
    by the clip, the true norm (norm / scale) and `max_norm`.

    ## References
    - PyTorch AMP examples, "Working with Unscaled Gradients"
    """

    code = "AMP101"
    name = "clip-before-unscale"
    message = "`{clip}` runs on gradients still multiplied by the loss scale"
    fix_title = "Call {unscales} before clipping"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    # Pre-filter: every clip spelling contains `clip_grad` (CLIP_FUNCTIONS, CLIP_METHODS);
    # a scaled backward is a `.backward`/`autograd.backward` of a `.scale(...)` call.
    requires_any = ("clip_grad",)
    # `X.scale(loss).backward()`, `torch.autograd.backward(X.scale(loss))`: both attributes;
    # or a library's scaling backward (`self.manual_backward(loss)`, `accelerator.backward(loss)`).
    and_requires_any = ((Attr("backward"), Attr("manual_backward")), (Attr("scale"), Attr("manual_backward"), _LIBRARY_BACKWARD))
    # The clip may sit in a project helper (`clip_gradients(model, 1.0)` from utils.py).
    imported_tokens = (0,)

    def check(self) -> None:
        proto = protocol(self.model)
        for graph in self.model.steps:
            for backward in graph.of_kind(Kind.BACKWARD):
                if not backward.scales_loss:
                    continue
                ends = _ENDS_SCALED_WINDOW if backward.scaled else _ENDS_MANAGED_WINDOW
                stop = lambda e, ends=ends: e.kind in ends or e.scales_loss  # noqa: E731
                unscales = lambda p: graph.runs_in_loop(p, lambda e: e.kind in _UNSCALES)  # noqa: E731
                window = [e for e in graph.reachable(backward, stop=stop, guarded=True, stop_at=unscales)]
                window_clips = [e for e in window if e.kind is Kind.CLIP]
                for event in window:
                    if event.kind is not Kind.CLIP:
                        continue
                    if clips_nothing(event):
                        continue  # `max_norm=inf`: at most a norm of scaled gradients (AMP112)
                    if backward.scaled and proto.scaler_off_where(backward.scaler, backward, event):
                        continue  # `GradScaler(enabled=flag)` and a clip under `not flag`: nothing scaled
                    if backward.scaled and _threshold_scaled_alike(event):
                        continue  # `clip_grad_norm_(params, max_norm * scaler.get_scale())`: clips as after unscale_
                    clip_name = dotted(event.node.func) or event.qualname or "clip_grad_norm_"
                    if not backward.scaled:
                        notes = (_library_unscale_note(backward),)
                        self.report_event(event, witnesses=(backward,), notes=notes, clip=clip_name, unscales="")
                        continue
                    scaler = Bindings.text_of(backward.scaler) or "scaler"
                    optimizers = None
                    if proto.alone_on_its_line(event) and _first_of_its_clips(graph, backward, event, window_clips):
                        optimizers = self._stepped_optimizers(graph, backward, event)
                    changes = None
                    if optimizers:
                        code = "\n".join(f"{scaler}.unscale_({o})" for o in optimizers)
                        changes = [InsertBefore(event.statement, code)]
                    unscales = " and ".join(f"`{scaler}.unscale_({o})`" for o in optimizers or ["optimizer"])
                    self.report_event(event, changes=changes, clip=clip_name, unscales=unscales)

    @staticmethod
    def _stepped_optimizers(graph, backward, clip) -> list[str] | None:
        """The optimizers (as written) that this scaler steps after the clip in this iteration,
        when unscaling all of them before the clip is exactly what the steps would do anyway.

        That holds when every one of those steps runs on every path from the clip to the
        end of the iteration (alternating GAN steps do not), in the clip's own loop and
        function, and nothing unscales this scaler's optimizers in the iteration already
        (a second `unscale_` raises).  None otherwise: no fix.
        """
        if backward.inlined or backward.scope is not clip.scope or clip.statement is None:
            return None
        proto = protocol(clip.scope.model)
        if not proto.nothing_handles(clip):
            return None  # an exception after the inserted unscale_ may skip the update: the next unscale_ raises
        if not (clip.qualname or "").startswith("torch.nn.utils."):
            return None  # a project's or a wrapper's clip may unscale by itself: a second unscale_ raises
        ends = lambda e: e.kind is Kind.UPDATE or (e.kind is Kind.BACKWARD and e.scaled)  # noqa: E731
        if any(e.kind is Kind.UNSCALE for e in graph.reachable(backward, stop=ends)):
            return None
        loop = training_loop(graph, clip)
        header = loop.header if loop is not None else None
        start = graph.point(clip)
        end_of_iteration = lambda p: p is graph.exit or p is header or event_is(p, ends)  # noqa: E731
        steps = [
            e for e in graph.reachable(clip, stop=ends)
            if e.kind is Kind.SCALER_STEP and search(start, found=lambda p, t=graph.point(e): p is t,
                                                      blocked=lambda p: p is header or event_is(p, ends))
        ]
        names: list[str] = []
        for step in steps:
            name = Bindings.text_of(step.optimizer)
            if (name is None or step.inlined or step.scope is not clip.scope or step.scaler != backward.scaler
                    or [id(loop) for loop in step.loops] != [id(loop) for loop in clip.loops]):
                return None
            if protocol(clip.scope.model).rebound_between(clip.scope, clip.node, step.node, name):
                return None  # `optimizer = o2` between them: the clip's `optimizer` is another object
            target = graph.point(step)
            if search(start, found=end_of_iteration, blocked=lambda p, t=target: p is t):
                return None  # some path from the clip skips this step
            if name not in names:
                names.append(name)
        if len(names) != 1:
            # Several optimizers: one may share a parameter with another, and unscaling both
            # before the first step divides that gradient twice for it.
            return None
        scaler = Bindings.text_of(backward.scaler)
        if scaler is None or not plain_scaler(clip.scope.model, proto, scaler, clip.scope, built_here=False):
            return None  # `unscale = scaler.unscale_` or `getattr(scaler, "unscale_")` may have unscaled already
        if any(not _stable_name(n, clip.scope) for n in names):
            return None  # `self.opt` a property: the inserted call may read another optimizer
        # Positive evidence that nothing leaves between the inserted unscale_ and the steps
        # (an exception a caller handles, a generator abandoned at a `yield`): the optimizer
        # would stay unscaled and the next iteration's unscale_ raise.
        clips = [e.node for e in graph.of_kind(Kind.CLIP) if e.scope is clip.scope]
        if any(_may_raise_on_non_finite(c) for c in (clip.node, *clips)):
            return None
        if not quiet_between(clip.scope.node, clip.statement, [s.node for s in steps], allowed=clips):
            return None
        if _threshold_reads_the_scale(clip.node, clip.scope):
            return None
        return names


def _first_of_its_clips(graph, backward, clip, clips) -> bool:
    """Every other clip this backward's gradients reach passes through `clip` first.

    Then one `unscale_` before it serves them all. `if clip_value: clip_grad_value_(...)`
    then `if clip_norm: clip_grad_norm_(...)` is two findings on two paths: a fix at each
    unscales twice when both options are on, and `unscale_` raises the second time
    (hostile pass 15); no fix for either then."""
    target = graph.point(clip)
    for other in clips:
        if other is clip:
            continue
        goal = graph.point(other)
        if search(graph.point(backward), found=lambda p, g=goal: p is g, blocked=lambda p: p is target):
            return False  # a path reaches the other clip without this one
    return True


def _threshold_scaled_alike(clip) -> bool:
    """The clip's threshold is multiplied by the loss scale (`max_norm * scaler.get_scale()`,
    also through a helper's `scale=` parameter and a name assigned the product): the scaled
    gradients' norm and the threshold grow alike, so the clip scales the gradients exactly as
    it would after `unscale_` (facebookresearch/mmf's `clip_gradients(..., scale=...)`)."""
    threshold = call_arg(clip.node, 1, "max_norm")
    scope, through = clip.scope, clip.through
    for _ in range(3):
        if isinstance(threshold, cst.Name) and "." not in threshold.value:
            values = scope.assignments.get(threshold.value, [])
            threshold = values[0] if len(values) == 1 else threshold
        if isinstance(threshold, cst.BinaryOperation) and isinstance(threshold.operator, cst.Multiply):
            return any(is_loss_scale(side, scope, through) for side in (threshold.left, threshold.right))
        if not isinstance(threshold, cst.Name):
            return False
    return False


def _threshold_reads_the_scale(clip: cst.Call, scope) -> bool:
    """`clip_grad_norm_(params, max_norm)` with `max_norm = clip * scaler.get_scale()`: a
    threshold already in scaled space clips right; an inserted `unscale_` would make it one
    the norm never reaches.  The threshold's text, or any value assigned to a name or a
    `self` attribute in it (in any method of the class); a bare parameter of the function
    may be anything its callers pass (`train_step(x, y, clip * scaler.get_scale())`), so it
    counts as reading the scale (hostile passes 12 and 13)."""
    args = [a.value for a in clip.args[1:] if a.keyword is None or a.keyword.value in ("max_norm", "clip_value")]
    module = scope.model.module
    fn = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)} if fn else set()
    pending, seen = list(args), 0
    while pending and seen < 32:
        expr = pending.pop()
        seen += 1
        if re.search(r"\b_?(get_)?scale\b|_scale\b", module.code_for_node(expr)):
            return True
        if isinstance(expr, cst.Name) and expr.value in params:
            return True  # the threshold is what the caller passes (not `args.clip` of an `args`)
        for name in _names(expr):
            pending.extend(value for value, _ in scope.model.bindings.values.assigned(name, scope))
    return False


def _names(expr: cst.CSTNode) -> list[cst.BaseExpression]:
    """The names read in `expr`, and its `self.<attr>` attributes (whole, not their parts)."""
    found: list[cst.BaseExpression] = []

    class _Collect(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                found.append(node)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    expr.visit(_Collect())
    return found


def _stable_name(text: str, scope) -> bool:
    """A plain name, or `self.<attr>` that the class assigns and does not compute (no method
    or property of that name): reading it twice gives one object."""
    if "." not in text:
        return True
    head, _, attr = text.partition(".")
    cls = getattr(scope, "cls", None)
    if cls is None or head != scope.self_name or "." in attr or attr in cls.methods:
        return False
    return bool(scope.model.bindings.values.assigned(cst.parse_expression(text), scope))


def _may_raise_on_non_finite(clip: cst.Call) -> bool:
    """`clip_grad_norm_(..., error_if_nonfinite=True)` raises on the infinite gradients
    an overflowing step has (its fourth parameter; anything but a literal False)."""
    if any(a.star == "**" for a in clip.args):
        return True  # `clip_grad_norm_(params, **clip_kwargs)`: it may be set there
    arg = call_arg(clip, 3, "error_if_nonfinite")
    return arg is not None and not (isinstance(arg, cst.Name) and arg.value == "False")


def _library_unscale_note(backward) -> str:
    """How the library of a managed backward wants clipping done (it unscales there)."""
    func = backward.node.func
    receiver = dotted(func.value) if isinstance(func, cst.Attribute) else None
    if isinstance(func, cst.Attribute) and func.attr.value == "manual_backward":
        return ("`manual_backward` scales the loss under Lightning's 16-mixed precision and only the optimizer "
                "step unscales (`self.clip_gradients` does not): clip in `on_before_optimizer_step`, which runs "
                "after that unscale, or unscale with the precision plugin's scaler first")
    if "fabric" in (receiver or "").lower():
        return f"`{receiver}.backward` scales the loss in float16 mixed precision: clip with `{receiver}.clip_gradients(...)`, which unscales first"
    return (f"`{receiver}.backward` scales the loss in float16 mixed precision: clip with `{receiver}.clip_grad_norm_(...)` "
            f"(or call `{receiver}.unscale_gradients()` first)")
