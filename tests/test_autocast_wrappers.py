"""A project's own autocast wrappers enter autocast with what the call site hands them.

`amplint/analysis/autocast_entries.py`: a function that returns `torch.autocast(...)`, a
contextmanager that yields inside one, a `functools.partial` of it, a choice between it and
`nullcontext`; the call's arguments are bound to the wrapper's parameters.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.analysis.model import ModuleModel

F16, B16 = frozenset({"float16"}), frozenset({"bfloat16"})

WRAPPERS = """
import contextlib
import functools

import torch


def torch_autocast(device_type="cuda", **kw):
    return torch.autocast(device_type=device_type, **kw)


def forwarding(*args, **kwargs):
    return torch.autocast(*args, **kwargs)


@contextlib.contextmanager
def maybe_autocast(enabled, dtype=torch.float16):
    with torch.autocast("cuda", dtype=dtype, enabled=enabled):
        yield


@contextlib.contextmanager
def if_enabled(enabled):
    if enabled:
        with torch.autocast("cuda", dtype=torch.float16):
            yield
    else:
        yield


def amp_ctx(fp16):
    return maybe_autocast(enabled=fp16, dtype=torch.float16 if fp16 else torch.bfloat16)


def autocast_or_nothing(use_amp, dtype=torch.bfloat16):
    return torch.autocast("cuda", dtype=dtype) if use_amp else contextlib.nullcontext()


def get_ctx(dtype):
    return functools.partial(torch.autocast, "cuda", dtype=dtype)


def unknown_dtype(dtype):
    return torch.autocast("cuda", dtype=dtype)


choice = torch.autocast if use_amp else contextlib.nullcontext
made = get_ctx(torch.float16)
"""


def entered(item: str):
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(WRAPPERS) + f"with {item}:\n    pass\n"))
    with_node = model.module.body[-1]
    assert isinstance(with_node, cst.With)
    infos = model.bindings.autocast_of(with_node.items[0].item, model.module_scope)
    return [(i.device, i.dtypes, i.enabled) for i in infos], infos, with_node


@pytest.mark.parametrize(
    "item, expected",
    [
        # a function returning autocast: the dtype arrives through **kw, the device by default
        ("torch_autocast(dtype=torch.float16)", ("cuda", F16, True)),
        ('torch_autocast("cpu")', ("cpu", B16, True)),
        ('torch_autocast(device_type="cuda", dtype=torch.bfloat16, enabled=False)', ("cuda", B16, False)),
        # positional arguments gathered by *args and spread again
        ('forwarding("cuda", torch.bfloat16)', ("cuda", B16, True)),
        # a contextmanager: its parameter's default, or what the call passes
        ("maybe_autocast(use_amp)", ("cuda", F16, None)),
        ("maybe_autocast(False)", ("cuda", F16, False)),
        ("maybe_autocast(True, dtype=torch.bfloat16)", ("cuda", B16, True)),
        ("if_enabled(args.amp)", ("cuda", F16, True)),
        # a wrapper calling a wrapper, the option flowing through both
        ("amp_ctx(args.fp16)", ("cuda", F16 | B16, None)),
        # autocast or nullcontext(): only the autocast branch enters anything
        ("autocast_or_nothing(args.amp)", ("cuda", B16, True)),
        ("autocast_or_nothing(args.amp, torch.float16)", ("cuda", F16, True)),
        # a callable chosen by an option, a partial, a helper returning a partial
        ('choice("cuda", dtype=torch.float16)', ("cuda", F16, True)),
        ("get_ctx(torch.float16)()", ("cuda", F16, True)),
        ("made()", ("cuda", F16, True)),
        # what a wrapper is handed but cannot be read stays unknown, never guessed
        ("unknown_dtype(config.dtype)", ("cuda", None, True)),
    ],
)
def test_wrapper_enters_autocast_with_what_the_call_passes(item: str, expected) -> None:
    found, _, _ = entered(item)
    assert found == [expected]


def test_wrapper_entry_points_at_the_call_that_enters_it() -> None:
    _, infos, with_node = entered("maybe_autocast(use_amp)")
    assert infos[0].node is with_node.items[0].item


@pytest.mark.parametrize("item", ["contextlib.nullcontext()", "some_library.ctx()", "open(path)"])
def test_other_contexts_enter_no_autocast(item: str) -> None:
    assert entered(item)[0] == []


def test_wrapper_body_read_alone_leaves_its_parameters_unknown() -> None:
    """The `with` inside the contextmanager is no float16 region by the default alone:
    which dtype it gets is decided where it is called."""
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(WRAPPERS)))
    fn = model.functions["maybe_autocast"]
    with_node = fn.body.body[0]
    infos = model.bindings.autocast_of(with_node.items[0].item, model.scope_of[fn])
    assert [(i.dtypes, i.enabled) for i in infos] == [(None, None)]


FLAG_WRAPPER = """
import torch


def autocast(enabled, device="cuda"):
    dtype = enabled if isinstance(enabled, torch.dtype) else None
    enabled = bool(enabled)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if new_torch:
        return torch.amp.autocast(device, enabled=enabled, **kwargs)
    return torch.cuda.amp.autocast(enabled and device == "cuda")


with autocast(%s, device=x.device.type):
    pass
"""


@pytest.mark.parametrize("flag, enabled", [("False", {False}), ("True", {True, None}), ("not args.amp", {None})])
def test_a_flag_the_wrapper_rebinds_or_combines_keeps_the_call_sites_value(flag: str, enabled) -> None:
    """`enabled = bool(enabled)` and `enabled and device == "cuda"`: `autocast(False)` is off
    on both paths; `autocast(True)` is on, or on where the device is cuda."""
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(FLAG_WRAPPER % flag)))
    with_node = model.module.body[-1]
    infos = model.bindings.autocast_of(with_node.items[0].item, model.module_scope)
    assert len(infos) == 2 and {i.enabled for i in infos} == enabled


class _TooManySteps(Exception):
    pass


def test_a_name_rebound_many_times_is_walked_once_per_value(monkeypatch) -> None:
    """`module = checkpoint_wrapper(module) if flag else module`, many times in a method that
    calls `module(x)` and itself: every call asks what its callee enters, and each
    rebinding doubles the branches, so a walk that does not remember its steps takes
    branches ** MAX_DEPTH of them (a 1,400-line video UNet took minutes per file)."""
    from amplint.analysis import autocast_entries
    from amplint.config import Config
    from amplint.engine import check_source

    rebinds = "".join("        module = checkpoint_wrapper(module) if self.flag else module\n        x = module(x)\n"
                      for _ in range(15))
    source = (
        "import torch\nfrom fairscale.nn.checkpoint import checkpoint_wrapper\n\n\nclass Net(torch.nn.Module):\n"
        "    def _forward_single(self, module, x):\n" + rebinds
        + "        for block in module:\n            x = self._forward_single(block, x)\n        return torch.log(x) / x.sum()\n"
        "\n    def forward(self, x):\n        with torch.autocast('cuda', enabled=False):\n"
        "            return self._forward_single(self.blocks, x)\n"
    )
    steps = []
    real = autocast_entries.produced

    def counted(*args, **kwargs):
        steps.append(1)
        if len(steps) > 200_000:
            raise _TooManySteps
        return real(*args, **kwargs)

    monkeypatch.setattr(autocast_entries, "produced", counted)
    check_source(source, "net.py", Config(select=("AMP502", "AMP203", "AMP201"), preview=True))
    assert len(steps) < 100_000  # 41,000 (most answered from memory); unbounded before
