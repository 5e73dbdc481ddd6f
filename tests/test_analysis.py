"""Unit tests of the semantic model: names, bindings, autocast, step graphs, casts."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.analysis.model import ModuleModel
from amplint.analysis.steps import MAX_INLINE_DEPTH, Kind


def build(src: str) -> ModuleModel:
    return ModuleModel.build(cst.parse_module(textwrap.dedent(src)))


def call_named(model: ModuleModel, text: str):
    """The first call whose callee's source is `text`, with its scope."""
    for site in model.calls:
        if model.module.code_for_node(site.node.func) == text:
            return site
    raise AssertionError(f"no call to {text}")


# --- qualified names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "imports, expr, qualified",
    [
        ("from torch.nn.utils import clip_grad_norm_ as clip", "clip", "torch.nn.utils.clip_grad_norm_"),
        ("import torch.nn as nn", "nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        ("from torch import amp", "amp.GradScaler", "torch.amp.GradScaler"),
        ("import torch as th", "th.cuda.amp.autocast", "torch.cuda.amp.autocast"),
        ("import torch.cuda.amp", "torch.cuda.amp.GradScaler", "torch.cuda.amp.GradScaler"),
        ("import torch.cuda.amp as cuda_amp", "cuda_amp.autocast", "torch.cuda.amp.autocast"),
        ("from torch.cuda import amp", "amp.custom_fwd", "torch.cuda.amp.custom_fwd"),
        ("from torch.cuda.amp import autocast, GradScaler as GS", "GS", "torch.cuda.amp.GradScaler"),
    ],
)
def test_qualified_names_through_every_import_form(imports: str, expr: str, qualified: str) -> None:
    model = build(f"{imports}\n{expr}\n")
    assert model.qualify(cst.parse_expression(expr)) == qualified


def test_imports_inside_functions_and_branches_count() -> None:
    model = build(
        """
        def main(args):
            if args.amp:
                from torch.cuda.amp import autocast
        """
    )
    assert model.qualify(cst.parse_expression("autocast")) == "torch.cuda.amp.autocast"


def test_unimported_names_do_not_qualify() -> None:
    model = build("import torch\n")
    assert model.qualify(cst.parse_expression("amp.autocast")) is None
    assert model.qualify(cst.parse_expression("model(x)")) is None


def test_relative_import_uses_the_package() -> None:
    model = ModuleModel.build(cst.parse_module("from .utils import helper\n"), "pkg/mod.py", package="pkg.sub")
    assert model.qualify(cst.parse_expression("helper")) == "pkg.sub.utils.helper"


# --- scalers and optimizers by use -------------------------------------------------------


@pytest.mark.parametrize("name", ["self.scaler", "self._scaler", "amp_scaler", "ls", "self.wrapper.gs"])
def test_scaler_identified_by_scale_backward_whatever_its_name(name: str) -> None:
    model = build(
        f"""
        class T:
            def step(self, loss, optimizer, ls):
                amp_scaler = ls
                {name}.scale(loss).backward()
                {name}.step(optimizer)
        """
    )
    site = call_named(model, f"{name}.step")
    assert model.bindings.is_scaler(site.node.func.value, site.scope)
    # what scaler.step receives is an optimizer
    assert model.bindings.is_optimizer(site.node.args[0].value, site.scope)


def test_scaler_identified_by_unscale_and_construction() -> None:
    model = build(
        """
        import torch
        gs = torch.amp.GradScaler("cuda")
        def f(thing, opt):
            thing.unscale_(opt)
        """
    )
    assert any(k.endswith(":gs") for k in model.bindings.scaler_keys)
    assert any(k.endswith(":thing") for k in model.bindings.scaler_keys)


def test_disabled_scaler_construction_is_no_scaler() -> None:
    model = build(
        """
        import torch
        s = torch.amp.GradScaler("cuda", enabled=False)
        """
    )
    assert not model.bindings.scaler_keys
    assert not model.bindings.uses_enabled_scaler


def test_self_attribute_is_one_key_across_methods() -> None:
    model = build(
        """
        class T:
            def a(self):
                self.scaler.update()
            def b(self):
                self.scaler.update()
        """
    )
    keys = {model.bindings.key(s.node.func.value, s.scope) for s in model.calls}
    assert keys == {"T.self.scaler"}


# --- autocast ----------------------------------------------------------------------------


def autocast_info(src: str):
    model = build(src)
    with_node = next(n for n in model.module.body if isinstance(n, cst.With))
    infos = model.bindings.autocast_of(with_node.items[0].item, model.module_scope)
    assert len(infos) == 1
    return infos[0]


def test_cuda_legacy_autocast_defaults_to_float16() -> None:
    info = autocast_info("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n")
    assert (info.device, info.dtypes, info.enabled) == ("cuda", frozenset({"float16"}), True)


def test_torch_autocast_cuda_default_fp16_and_cpu_default_bf16() -> None:
    assert autocast_info('import torch\nwith torch.autocast("cuda"):\n    pass\n').dtypes == frozenset({"float16"})
    assert autocast_info('import torch\nwith torch.autocast(device_type="cpu"):\n    pass\n').dtypes == frozenset({"bfloat16"})


def test_autocast_enabled_literal_false_disables_and_variable_may_enable() -> None:
    off = autocast_info('import torch\nwith torch.autocast("cuda", enabled=False):\n    pass\n')
    assert off.enabled is False and not off.may_be_enabled
    maybe = autocast_info('import torch\nwith torch.autocast("cuda", enabled=use_amp):\n    pass\n')
    assert maybe.enabled is None and maybe.may_be_enabled
    legacy = autocast_info("import torch\nwith torch.cuda.amp.autocast(False):\n    pass\n")
    assert legacy.enabled is False


def test_autocast_dtype_through_variables_and_partial() -> None:
    info = autocast_info(
        """
        import functools, torch
        dtype = torch.bfloat16 if bf16 else torch.float16
        ctx = functools.partial(torch.autocast, "cuda", dtype=dtype)
        with ctx():
            pass
        """
    )
    assert info.device == "cuda" and info.dtypes == frozenset({"float16", "bfloat16"})


# --- step graphs -------------------------------------------------------------------------


def graph_of(model: ModuleModel, name: str):
    scope = next(s for s in model.scopes if s.name == name)
    return model.steps.graph(scope)


def test_helper_methods_are_inlined_and_anchor_at_the_call() -> None:
    model = build(
        """
        import torch
        class T:
            def _clip(self):
                torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            def step(self, loss):
                self.scaler.scale(loss).backward()
                self._clip()
        """
    )
    g = graph_of(model, "T.step")
    (clip,) = g.of_kind(Kind.CLIP)
    assert clip.inlined and model.module.code_for_node(clip.anchor) == "self._clip()"
    assert clip.via == ("T._clip",)
    (backward,) = g.of_kind(Kind.BACKWARD)
    assert backward.scaled and clip in list(g.reachable(backward))


def test_inlining_depth_is_bounded() -> None:
    depth = MAX_INLINE_DEPTH + 2
    helpers = "\n".join(f"def h{i}():\n    h{i + 1}()\n" for i in range(depth))
    src = f"import torch\n{helpers}\ndef h{depth}():\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\ndef main():\n    h0()\n"
    model = build(src)
    assert not graph_of(model, "main").of_kind(Kind.CLIP)
    shallow = build(
        "import torch\ndef h1():\n    h2()\ndef h2():\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\ndef main():\n    h1()\n"
    )
    assert graph_of(shallow, "main").of_kind(Kind.CLIP)


def test_recursion_does_not_inline_forever() -> None:
    model = build("def f():\n    f()\n    loss.backward()\n")
    assert len(graph_of(model, "f").of_kind(Kind.BACKWARD)) == 1


def test_loops_have_back_edges_and_breaks_leave() -> None:
    model = build(
        """
        def train(scaler, opt, loader):
            for x in loader:
                opt.zero_grad()
                scaler.scale(x).backward()
                if x is None:
                    break
            scaler.step(opt)
        """
    )
    g = graph_of(model, "train")
    (backward,) = g.of_kind(Kind.BACKWARD)
    reached = {e.kind for e in g.reachable(backward)}
    assert Kind.ZERO_GRAD in reached  # next iteration
    assert Kind.SCALER_STEP in reached  # after the loop (break or exhaustion)
    assert backward.loops and g.loop_of(backward) is g.loops[0]


def test_autocast_regions_and_nested_disable_on_events() -> None:
    model = build(
        """
        import torch
        def f(loss):
            with torch.autocast("cuda"):
                with torch.autocast("cuda", enabled=False):
                    loss.backward()
                loss.backward()
        """
    )
    inner, outer = graph_of(model, "f").of_kind(Kind.BACKWARD)
    assert inner.active_autocast is None
    assert outer.active_autocast is not None and outer.active_autocast.info.dtypes == frozenset({"float16"})


def test_guarded_reachability_follows_repeated_conditions() -> None:
    model = build(
        """
        import torch
        def f(scaler, loss, opt, m):
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if scaler is not None:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        """
    )
    g = graph_of(model, "f")
    scaled = next(e for e in g.of_kind(Kind.BACKWARD) if e.scaled)
    assert scaled.guards == (("scaler", True),)
    stop = lambda e: e.kind is Kind.UNSCALE  # noqa: E731
    assert Kind.CLIP in {e.kind for e in g.reachable(scaled, stop=stop)}  # path-insensitive
    assert Kind.CLIP not in {e.kind for e in g.reachable(scaled, stop=stop, guarded=True)}


def test_guards_are_forgotten_when_the_loop_reassigns_their_names() -> None:
    model = build(
        """
        def f(scaler, opt, loader, clip):
            for i, x in enumerate(loader):
                if i % 2 == 0:
                    scaler.scale(x).backward()
                if i % 2 == 0:
                    scaler.unscale_(opt)
                    scaler.step(opt)
                clip(x)
        """
    )
    g = graph_of(model, "f")
    (backward,) = g.of_kind(Kind.BACKWARD)
    # In the next iteration `i % 2 == 0` may be false again: the graph does not assume it.
    assert list(g.reachable(backward, guarded=True))


# --- casts -------------------------------------------------------------------------------


def test_casts_in_chains_and_upcasts() -> None:
    model = build(
        """
        import torch
        a = Net().cuda().half()
        b = Net().half().float()
        c = Lm.from_pretrained("x", torch_dtype=torch.float16).to("cuda")
        d = Net().to(dtype=torch.float32)
        """
    )
    targets = sorted(c.target_text for c in model.casts.module_casts)
    assert targets == ["a", "c"]


def test_scaled_backward_through_names_and_arithmetic() -> None:
    model = build(
        """
        def f(scaler, loss, k):
            scaled = scaler.scale(loss)
            scaled.backward()
            (scaler.scale(loss) / k).backward()
            (loss / k).backward()
        """
    )
    flags = [e.scaled for e in graph_of(model, "f").of_kind(Kind.BACKWARD)]
    assert flags == [True, True, False]


# --- dtypes from command-line options, spread keywords, optimizer factories --------------


def dtypes_of_cast(src: str):
    """The dtypes of the `.to(...)` call in the module (ModuleCast, else `_to_dtypes`)."""
    model = build(src)
    site = call_named(model, "model.to")
    return model.casts._to_dtypes(site.node, site.scope)


@pytest.mark.parametrize(
    "declaration, expected",
    [
        # the flag's spelling gives the destination; "O1" names no torch dtype
        ('p.add_argument("--train-dtype", choices=["float16", "float32", "O1"])', {"float16", "float32"}),
        ('p.add_argument("-t", "--train_dtype", choices=("bfloat16", "float64"))', {"bfloat16", "float64"}),
        ('p.add_argument("--dt", dest="train_dtype", choices=["half", "float"])', {"float16", "float32"}),
        ('DTYPES = ["float16", "float32"]\np.add_argument("--train-dtype", choices=DTYPES)', {"float16", "float32"}),
        ('p.add_argument("--train-dtype", choices=["float32", "float64"])', {"float32", "float64"}),
    ],
)
def test_getattr_torch_of_an_option_is_the_dtypes_among_its_choices(declaration: str, expected: set) -> None:
    src = f"import argparse, torch\np = argparse.ArgumentParser()\n{declaration}\n\ndef train(args):\n    model.to(dtype=getattr(torch, args.train_dtype))\n"
    assert dtypes_of_cast(src) == frozenset(expected)


def test_an_undeclared_option_named_like_a_dtype_may_be_reduced_precision() -> None:
    """DESIGN.md: code under an option is analysed as if the option were on."""
    src = "import torch\ndef train(cfg):\n    model.to(getattr(torch, cfg.precision))\n"
    assert dtypes_of_cast(src) == frozenset({"float16", "bfloat16", "float32"})
    # a name that says nothing of dtypes stays unknown
    assert dtypes_of_cast("import torch\ndef train(cfg):\n    model.to(getattr(torch, cfg.name))\n") is None


def test_option_choices_declared_by_a_script_that_imports_the_module(tmp_path) -> None:
    """backend.py's `args.train_dtype` is declared in train.py, which imports backend."""
    from amplint.project.index import ProjectIndex

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--train-dtype", choices=["float16", "float32"])\n'
        "def main():\n    from backend import train\n    train(p.parse_args())\n"
    )
    (tmp_path / "backend.py").write_text("import torch\ndef train(args):\n    dtype = getattr(torch, args.train_dtype)\n")
    model = ProjectIndex().model_at(tmp_path / "backend.py")
    scope = next(s for s in model.scopes if s.name == "train")
    assert model.options.choices("train_dtype") == frozenset({"float16", "float32"})
    assert model.bindings.values.dtypes(scope.assignments["dtype"][0], scope) == frozenset({"float16", "float32"})
    assert model.options.choices("other") is None


@pytest.mark.parametrize(
    "gate, hardware",
    [
        ("torch.cuda.is_available() and torch.cuda.is_bf16_supported()", True),
        ("args.bf16", False),  # an option: the float16 default may run anywhere
    ],
)
def test_autocast_spread_keywords_and_a_dtype_the_hardware_picks(gate: str, hardware: bool) -> None:
    info = autocast_info(
        "import torch\nautocast_args = dict()\n"
        f"if {gate}:\n    autocast_args = dict(dtype=torch.bfloat16)\n"
        'with torch.autocast("cuda", **autocast_args):\n    pass\n'
    )
    assert info.dtypes == frozenset({"float16", "bfloat16"})  # cuda's default, or the dict's dtype
    assert info.bf16_where_supported is hardware


def test_a_spread_dict_literal_gives_its_dtype() -> None:
    info = autocast_info('import torch\nkw = {"dtype": torch.bfloat16}\nwith torch.autocast("cuda", **kw):\n    pass\n')
    assert info.dtypes == frozenset({"bfloat16"})


def test_an_optimizer_factory_builds_from_its_parameter() -> None:
    model = build(
        """
        import torch
        def get_std_opt(model_params, lr):
            return torch.optim.Adam(model_params, lr=lr, eps=1e-9)
        def global_net_opt(lr):
            return torch.optim.Adam(net.parameters(), lr=lr)
        def train(model):
            a = get_std_opt(model.parameters(), 1.0)
            b = global_net_opt(1.0)
        """
    )
    std = call_named(model, "get_std_opt")
    inner, scope = model.casts.factory_construction(std.node, std.scope)
    assert model.module.code_for_node(inner.func) == "torch.optim.Adam" and scope.name == "get_std_opt"
    other = call_named(model, "global_net_opt")
    # it optimizes a global module; `lr=lr` passes a parameter that is no parameter tensor
    assert model.casts.factory_construction(other.node, other.scope) is None
    assert model.casts.factory_construction(call_named(model, "torch.optim.Adam").node, std.scope) is None
