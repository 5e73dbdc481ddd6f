"""AMP401 deprecated-cuda-amp."""

from __future__ import annotations

from amplint.diagnostics import Applicability
import libcst as cst

from amplint.changes import Replace
from amplint.prefilter import Word
from amplint.rules._base import FixAvailability, Rule


class DeprecatedCudaAmp(Rule):
    """
    ## What it does
    Flags every reference to `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`,
    `torch.cuda.amp.custom_fwd`, `torch.cuda.amp.custom_bwd`, `torch.cpu.amp.autocast`
    and `torch.cpu.amp.GradScaler`: imports, calls, decorators, assignments and
    arguments, one finding per reference, whatever alias reaches them.

    Not flagged: annotations (`def f(s: torch.cuda.amp.GradScaler)`), which construct
    nothing, and version-gated fallbacks, the deprecated spelling kept on purpose for
    an older torch: one branch of a torch-version check (`if is_torch_version(">=",
    "2.4"):`, `... if _TORCH_GREATER_EQUAL_2_4 else ...`, `hasattr(torch.amp, ...)`)
    whose other branch uses the modern spelling, or the `except` (AttributeError,
    ImportError, TypeError, or anything) of a `try` that uses it.

    ## Why is this bad?
    These spellings have emitted a `FutureWarning` on every call since PyTorch 2.4 and
    will be removed. The device-generic replacements (`torch.autocast(device_type)`,
    `torch.amp.GradScaler(device)`, `torch.amp.custom_fwd(device_type=...)`) behave the
    same and work on every backend.

    ## Example
    ```python
    import torch

    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast():
        loss = model(x)
    ```

    Use instead:
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = model(x)
    ```

    Not flagged either: a local of the same name (a parameter, a loop or comprehension
    variable, a lambda argument called `autocast`), which is not the import.

    ## Fix safety
    Unsafe (applied with `--unsafe-fixes` only) where the change reaches code amplint cannot
    read: a GradScaler construction (the object built is a `torch.amp.GradScaler`, not the
    deprecated subclass, and an `isinstance` test in a library or a plugin loaded by path,
    `type(scaler)(...)` or a pickle allow-list tells them apart), and an import at module
    level (it rebinds a module attribute that a lazy package `__getattr__`, `import_module`
    of a computed name, `runpy.run_path` or a registry looked up by string may still call
    the old way), and an autocast object that leaves its `with` (assigned, passed,
    returned: an `isinstance` test or `type(ctx)(...)` elsewhere tells the classes apart).
    Safe for a fully qualified autocast call that is a `with` item or a decorator, and for
    an import inside a function. No fix at all where the module or one that shares objects
    with it (its importers and what they import) replaces a legacy name at run time
    (`torch.cuda.amp.autocast = torch.npu.amp.autocast`, `mock.patch("torch.cuda.amp.autocast")`,
    or through any other spelling: `cpu_amp.autocast = Shim` after `import torch.cpu.amp as
    cpu_amp`, a `torch_mod` parameter, `setattr(amp_mod, "autocast", ...)`; any statement
    that assigns `autocast`, `GradScaler`, `custom_fwd` or `custom_bwd` as an attribute of
    anything but `self`, except a literal setting such as `cfg.autocast = True`):
    the modern spelling would skip the replacement; one made inside another package cannot
    be seen. Either way offered only where the new code builds the same object
    from the same arguments, wherever it runs: a call keeps every argument (legacy positional
    `autocast(enabled, dtype, cache_enabled)` arguments become keywords, `**kwargs` and
    what follows stay) and passes the device the old class implied; a legacy autocast
    also passes the dtype and the weight cache the old class passed (`torch.autocast("cuda",
    dtype=torch.float16, cache_enabled=True)`, `torch.autocast("cpu", dtype=torch.bfloat16,
    cache_enabled=True)`), since `torch.autocast` without them takes the enclosing region's
    (a `torch.cuda.amp.autocast()` in a model's forward, called inside a bfloat16 region,
    runs float16; inside a region built with `cache_enabled=False` it would reread a weight
    updated in place where the old one reused its cast copy); a decorator becomes a call of the
    modern decorator; `from torch.cuda.amp import autocast` becomes `from torch.amp
    import autocast` together with all of its uses, so no name is left unbound; an
    annotation needs no change. The object built is a `torch.amp.GradScaler` (or
    `torch.autocast`) rather than its deprecated subclass: the same state and methods,
    told apart only by an `isinstance` test against the deprecated class, or by reading
    the class's module (`type(s).__module__`, `repr(type(s))` in a log line), which no
    fix can keep.

    No fix, the finding alone, where that cannot be shown: a bare reference to the
    class or function (a base class, `Scaler = torch.cuda.amp.GradScaler`,
    `functools.partial(...)`, a `cls=` default, `isinstance`), since
    `torch.amp.GradScaler`'s first parameter is `device` where the old class's is
    `init_scale`; the constructions of a class the module also uses as a value (an
    annotation counts where a decorator or a base class may test values against it:
    `@validate_call`, `@typechecked`, `@f.register`, a pydantic model's field), and an
    import one such use goes through; an import the module re-exports (listed in
    `__all__`, or `import autocast as autocast`) or that another module of the project
    imports (a notebook's code cells count, where the notebook names the module), since
    its importers call it the old way; an import chosen per device (`from
    torch.cuda.amp import autocast` in one branch, `from torch.cpu.amp import autocast`
    in the other); the constructions of a class that another module reachable from this
    one tests with `isinstance` (or uses as a value); a legacy autocast given
    `**kwargs` and no `dtype` or no `cache_enabled`, or where no name reads the torch
    module at the call (the dtype needs one; amplint adds no import): the name must be
    bound by a module-level `import torch` (or `import torch as th`) that has run before
    the call, and by nothing else anywhere in the module, in any scope and by any binding
    form (an assignment, a parameter, a `for`, `with` or `except ... as` target, `del`,
    another import, a match capture, a walrus, a `def` or `class`, `global`); an import
    in a class body, which binds a class attribute that `self.autocast(...)` reaches from
    anywhere; `*args` passed to the legacy autocast; in a
    notebook, a name that an IPython line (`%time`, `%timeit`) uses, which amplint does
    not rewrite; a module with any star import, which may bind the name or `torch`
    again; a module that reaches its own names through frames or by module name
    (`sys._getframe().f_globals`, `import __main__`, `importlib.import_module(__name__)`),
    or whose names another module resolves by a string (`pkgutil.resolve_name`,
    `pydoc.locate`); an imported name used in an annotation (read back at run time by
    `typing.get_type_hints`, `inspect.signature`, a metaclass, a checker applied by a
    call) or in a doctest of the module (`>>> GradScaler(4.0)`); a module
    that sets autocast's global defaults (`torch.set_autocast_dtype`), which
    `torch.autocast(device)` reads where the legacy class passed float16 itself; a fix
    that would rewrite a line marked `# noqa: AMP401`; and a spelling that
    `target-torch` does not have (`torch.amp.GradScaler("cuda")` needs torch 2.3,
    `torch.amp.custom_fwd(device_type=...)` 2.4, `from torch.amp import autocast` 1.13),
    where the message says which torch it needs.  Inside an f-string the device string
    takes the quote the f-string does not use, so that the fixed file parses on every
    Python the original parsed on (before 3.12 a replacement field cannot hold its own
    quote); with both quotes taken there is no fix, nor in a field that prints its own
    text (`f"{torch.cuda.amp.GradScaler()=}"`: the output would change); a legacy name split over lines
    (`torch.cpu.amp \\` then `.autocast(...)`), which the new spelling would join, moving every
    later line (line numbers in logs and tracebacks).

    ## Runtime confirmation
    `amplint verify` records the FutureWarning PyTorch raises at that line.

    ## References
    - PyTorch AMP docs, "torch.cuda.amp.autocast(args...) is deprecated"
    """

    code = "AMP401"
    one_per_reference = True  # each reference (each operation) is its own finding
    name = "deprecated-cuda-amp"
    message = "`{old}` is deprecated since PyTorch 2.4{why_no_fix}"
    fix_title = "Use `{new}`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.SAFE
    # Pre-filter: every DEPRECATIONS name ends in one of these words and has `amp` and
    # `cuda`/`cpu` components (in the text, or in the package of a relative import).
    # NB: never `cuda.amp`: `torch.cuda .amp` and `import torch.cuda as c; c.amp` are legal.
    requires_any = ("autocast", "GradScaler", "custom_fwd", "custom_bwd")
    # (whole words: a qualified name's parts, not `example`, `clamp` or `timestamp`)
    and_requires_any = ((Word("amp"),), (Word("cuda"), Word("cpu")))

    def check(self) -> None:
        target = self.options.target_torch
        for ref in self.model.deprecations.references:
            dep = ref.deprecation
            new = f'{dep.new}("{dep.device}")' if dep.device_argument == "positional" else f'{dep.new}(device_type="{dep.device}")'
            changes, why_no_fix = ref.changes, ""
            if changes and target is not None and target < ref.needs:
                # NB: the modern spelling would not run on the oldest torch the project supports.
                changes = None
                what = f"`{new}`" if ref.needs == dep.new_since else "its fixed import"
                why_no_fix = f"; {what} needs torch {_version(ref.needs)}, target-torch is {_version(target)}"
            if changes and not _keeps_line_count(changes, self.model.module):
                # `with torch.cpu.amp \` / `.autocast(...)`: the new spelling on one line would
                # move every line below it (`%(lineno)d` in logs, tracebacks; hostile pass 15).
                changes = None
            safety = Applicability.UNSAFE if ref.unsafe_because else None
            self.report(ref.node, changes=changes, old=dep.old, new=new, why_no_fix=why_no_fix, safety=safety)


def _version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _keeps_line_count(changes, module: cst.Module) -> bool:
    """Each replacement spans as many lines as the code it replaces."""
    for change in changes:
        if not isinstance(change, Replace):
            continue
        new = change.new
        if isinstance(new, cst.FlattenSentinel):
            text = "".join(module.code_for_node(n) for n in new.nodes)
        elif isinstance(new, cst.CSTNode):
            text = module.code_for_node(new)
        else:
            text = new
        if module.code_for_node(change.node).count("\n") != text.count("\n"):
            return False
    return True
