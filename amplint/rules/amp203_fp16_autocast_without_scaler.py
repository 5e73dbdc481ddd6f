"""AMP203 fp16-autocast-without-scaler."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.autocast_entries import holds_yield
from amplint.analysis.conditions import facts, guarding_tests
from amplint.analysis.precision import may_run_fp16, precision_of
from amplint.analysis.steps import Kind
from amplint.analysis.torch_api import AUTOCAST_CONTEXTS
from amplint.analysis.trainers import TRAINING_HOOKS, training_hook_of
from amplint.prefilter import AUTOCAST_IN_CODE, Attr, Use, Word
from amplint.rules._base import Rule

# autocast classes whose dtype defaults to the device's (float16 on cuda): the device-type ones.
_DEVICE_DEFAULT_AUTOCAST = frozenset(q for q in AUTOCAST_CONTEXTS if not q.startswith(("torch.cuda.", "torch.cpu.")))


class Fp16AutocastWithoutScaler(Rule):
    """
    ## What it does
    Flags a float16 autocast region (an explicit `dtype=torch.float16`, a dtype option
    that can be float16, or cuda autocast's default dtype) entered by code that trains
    (a plain `backward()` and an `optimizer.step()` in the same function, helpers
    inlined) in a module that builds or uses no enabled GradScaler (a project's own
    wrapper such as timm's `NativeScaler`, or a `loss_scaler` parameter, counts as
    one). A region in a
    model's `forward` (`with autocast():` or `@autocast()`) counts when the module
    trains without a scaler. The region may be entered through the project's own
    wrapper (a function that returns `torch.autocast(...)`, a contextmanager that
    yields inside one, a `functools.partial` of it, a helper choosing it or
    `nullcontext`): the dtype and `enabled` are those the call hands the wrapper
    (`with maybe_autocast(args.amp):` with a float16 default is float16, and
    `maybe_autocast(False)` is off). The diagnostic points at the autocast `with` (or
    decorator) that the training code writes.

    In a `compute_loss` or `training_step` of a `transformers.Trainer` subclass (trl's
    trainers included), the trainer does the backward and the step, and it builds a
    GradScaler only for `fp16=True`. There an autocast that names no dtype
    (`autocast(self.accelerator.device.type)`: float16 on CUDA) is reported when it
    is entered only under a condition that names bfloat16 (`if
    self._peft_has_been_casted_to_bf16`, `if args.bf16`): bfloat16 was meant, and in that
    run no scaler exists.

    ## Why is this bad?
    float16's smallest subnormal is about 6e-8. Gradients of real networks are often
    smaller; without loss scaling they flush to zero in the float16 backward and the
    corresponding weights never learn, with no error and a loss that still goes down
    a little. `torch.amp.GradScaler` multiplies the loss before backward and divides
    the gradients before the step. bfloat16 has float32's exponent range and needs no
    scaler; a library that manages precision (`accelerator.autocast()`,
    `accelerator.backward`) scales for you and is not reported.

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Runtime confirmation
    `amplint verify` sees a backward under float16 autocast with no scaler and counts
    the gradients flushed to zero.
    """

    code = "AMP203"
    name = "fp16-autocast-without-scaler"
    message = "float16 autocast is used for training without a GradScaler"
    # Pre-filter (as in AMP201): an autocast, an unmanaged backward (`.backward`,
    # `autograd.backward`) and an optimizer or scaler `.step` in the same function.
    # A trainer's hook (`def compute_loss`) stands for both: the trainer backpropagates and steps.
    requires_any = (AUTOCAST_IN_CODE,)
    and_requires_any = ((Use("backward"), *map(Word, TRAINING_HOOKS)), (Attr("step"), *map(Word, TRAINING_HOOKS)))
    imported_tokens = (1, 2)  # the training (backward, step) may run in project helpers

    def check(self) -> None:
        precision = precision_of(self.model)
        if precision.enabled_scaler or precision.scaler_wrapper:
            return
        reported: set[int] = set()
        self._check_trainer_hooks(precision, reported)
        if not any(may_run_fp16(info) for _, _, info in precision.autocast_sites):
            return
        trains = False
        for scope in self._training_scopes():
            graph = self.model.steps.graph(scope)
            events = graph.events
            # NB: with no enabled scaler in the module, `scaler.scale(loss)` of a
            # literally disabled one returns the loss unchanged: still an unscaled backward.
            backward = any(e.kind is Kind.BACKWARD and not e.managed for e in events)
            stepped = any(e.kind in (Kind.OPT_STEP, Kind.SCALER_STEP) for e in events)
            if not (backward and stepped):
                continue
            trains = True
            if self._scales_through_helpers(events):
                continue  # an optimizer wrapper of the project scales (`self.optim.backward(loss)`)
            for region in graph.regions:
                if region.no_grad:
                    continue  # a validation helper inlined into train(): nothing is trained there
                if holds_yield(region.with_node):
                    continue  # a contextmanager's own region: judged where it is entered, with its arguments
                if may_run_fp16(region.info) and id(region.with_node) not in reported:
                    reported.add(id(region.with_node))
                    self.report(region.with_node)
        if not trains:
            return
        # A model whose forward enters autocast itself (the DataParallel recipe).
        for region in precision.regions:
            scope = region.scope
            method = getattr(getattr(scope, "node", None), "name", None)
            in_forward = scope.cls is not None and method is not None and method.value == "forward"
            if in_forward and may_run_fp16(region.info) and id(region.node) not in reported:
                reported.add(id(region.node))
                self.report(region.node)

    def _check_trainer_hooks(self, precision, reported: set[int]) -> None:
        """Regions of a trainer's training hook that name no dtype, entered for bfloat16 runs."""
        code = self.model.module.code_for_node
        for region in precision.regions:
            info, scope = region.info, region.scope
            call = info.node
            if info.managed or not info.may_be_enabled or not isinstance(call, cst.Call):
                continue
            if info.dtypes is not None and "float16" not in info.dtypes:
                continue  # a device known to be cpu: its default is bfloat16
            if self.model.qualify(call.func) not in _DEVICE_DEFAULT_AUTOCAST or not _names_no_dtype(call):
                continue
            trainer = training_hook_of(scope)
            if trainer is None or id(region.node) in reported:
                continue
            condition = _bfloat16_condition(scope.node, call, code)
            if condition is None:
                continue
            reported.add(id(region.node))
            self.report(region.node, notes=(
                f"`{code(call)}` names no dtype: float16 on CUDA, though it is entered only when `{condition}`, "
                f"a bfloat16 run, for which `{trainer}` builds no GradScaler",
            ))

    @staticmethod
    def _scales_through_helpers(events) -> bool:
        """A scaled backward or a scaler step reached through a helper or a wrapper's method."""
        return any(
            e.inlined and ((e.kind is Kind.BACKWARD and e.scaled) or e.kind in (Kind.SCALER_STEP, Kind.UNSCALE))
            for e in events
        )

    def _training_scopes(self) -> list:
        """Scopes that call backward, and those that call them (a `train_step` helper).

        Only their graphs can hold a backward event; building the others is wasted.
        """
        model = self.model
        found = {}
        for site in model.calls:
            func = site.node.func
            if (isinstance(func, cst.Attribute) and func.attr.value == "backward") or model.qualify(func) == "torch.autograd.backward":
                found[id(site.scope)] = site.scope
        names = {s.node.name.value for s in found.values() if not s.is_module}
        for site in model.calls:
            func = site.node.func
            called = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
            if called in names:
                found.setdefault(id(site.scope), site.scope)
        return list(found.values())


def _names_no_dtype(call: cst.Call) -> bool:
    """`autocast(device_type)`: no `dtype=`, nothing in its place (the second argument)."""
    if any(a.star for a in call.args) or any(a.keyword is not None and a.keyword.value == "dtype" for a in call.args):
        return False
    return sum(1 for a in call.args if a.keyword is None) <= 1


def _bfloat16_condition(function: cst.CSTNode, call: cst.Call, code) -> str | None:
    """The test that must hold for `call` to run and that says the run is bfloat16."""
    for test, truth in guarding_tests(function, call) or ():
        for subject, value in facts(test, code, truth):
            selected = subject if value is True else str(value[1]) if isinstance(value, tuple) and value[0] == "==" else ""
            if "bf16" in selected.lower() or "bfloat16" in selected.lower():
                return code(test)
    return None
