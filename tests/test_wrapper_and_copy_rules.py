"""AMP109, AMP110, AMP112, AMP206, AMP305 (issue 14): the real shapes and their look-alikes.

The fixtures (fixtures/AMP1xx, fixtures/projects/) hold the shapes that also run under
`verify`; these cases are the ones that need a library (Lightning, Accelerate) or that pin
one decision of a rule each.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint.engine import check_source


def _lines(source: str, code: str, path: str = "<string>") -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source).lstrip("\n"), path, select=[code])]


# --- AMP101 clip-before-unscale, with a library's scaling backward ------------------------------


def test_amp101_lightning_manual_backward_in_a_helper_then_torch_clip_is_reported() -> None:
    # NeMo's preference-optimization step: the chunked helper calls manual_backward; under
    # "16-mixed" the plugin unscales only inside opt.step().
    src = """
    import torch
    import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def _chunks(self, batch, do_backward):
            for chunk in batch:
                loss = self(chunk).mean()
                if do_backward:
                    self.manual_backward(loss)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self._chunks(batch, do_backward=True)
            torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm=1.0)
            opt.step()

        def on_before_optimizer_step(self, optimizer):
            torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm=1.0)
    """
    assert _lines(src, "AMP101") == [15]


def test_amp101_lightning_clip_gradients_after_manual_backward_is_reported_in_its_hook_it_is_not() -> None:
    # LightningModule.clip_gradients does not unscale (Lightning issue #18089); the plugin
    # unscales in opt.step() and before the automatic configure_gradient_clipping hook.
    src = """
    import pytorch_lightning as pl

    class Codec(pl.LightningModule):
        def _step(self, optimizer):
            self.clip_gradients(optimizer, 1.0, gradient_clip_algorithm="norm")
            optimizer.step()

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self(batch).mean())
            self._step(opt)

        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
    """
    assert _lines(src, "AMP101") == [12]  # at the helper call: the backward is in training_step


def test_amp101_accelerate_backward_then_torch_clip_is_reported_its_own_clip_is_not() -> None:
    src = """
    import torch

    for batch in loader:
        accelerator.backward(model(batch).mean())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    for batch in loader:
        accelerator.backward(model(batch).mean())
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        optimizer.zero_grad()

    for batch in loader:
        accelerator.backward(model(batch).mean())
        accelerator.unscale_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    """
    assert _lines(src, "AMP101") == [5]


def test_amp101_library_backward_the_loop_never_scales_is_not_a_scaled_backward() -> None:
    # DeepSpeed's engine and a trainer keep gradients of their own (steps.MANAGED_RECEIVER_WORDS).
    src = """
    import torch

    for batch in loader:
        model_engine.backward(model_engine(batch).mean())
        torch.nn.utils.clip_grad_norm_(model_engine.parameters(), 1.0)
        model_engine.step()
    """
    assert _lines(src, "AMP101") == []


def test_amp101_finding_after_a_library_backward_says_how_the_library_clips() -> None:
    src = "import torch\naccelerator.backward(loss)\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n"
    (found,) = check_source(src, "<string>", select=["AMP101"])
    assert found.fix is None  # the scaler is the library's: nothing to insert
    assert any("accelerator.clip_grad_norm_" in note for note in found.notes)


def test_amp101_helper_given_an_infinite_threshold_clips_nothing() -> None:
    # HF Trainer: one helper clips with `max_norm`, and is also called with inf only to measure.
    src = """
    import torch
    from torch.nn.utils import clip_grads_with_norm_, get_total_norm

    class Trainer:
        def _norm_and_clip(self, params, max_norm):
            total = get_total_norm([p.grad for p in params])
            clip_grads_with_norm_(params, max_norm, total)
            return total

        def _clip(self, params):
            return self._norm_and_clip(params, self.args.max_grad_norm)

        def _measure(self, params):
            return self._norm_and_clip(params, float("inf"))

        def step(self, params, loss):
            self.accelerator.backward(loss)
            clipped = self._clip(params)
            measured = self._measure(params)
            self.optimizer.step()
    """
    assert _lines(src, "AMP101") == [18]
    assert _lines(src, "AMP112") == [18, 19]  # both measure scaled gradients


# --- AMP112 norm-of-scaled-gradients ---------------------------------------------------------


def test_amp112_lightning_manual_backward_then_norm_helper_is_reported_at_the_helper_call() -> None:
    src = """
    import torch
    import pytorch_lightning as pl

    class Codec(pl.LightningModule):
        def _grad_norm(self, params):
            grads = [p.grad for p in params if p.grad is not None]
            return torch.nn.utils.get_total_norm(grads)

        def _step(self, optimizer, params):
            norm = self._grad_norm(params)
            self.log("grad_norm", norm)
            optimizer.step()

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self(batch).mean()
            opt.zero_grad()
            self.manual_backward(loss)
            self._step(opt, self.parameters())
    """
    assert _lines(src, "AMP112") == [19]


def test_amp112_lightning_on_after_backward_norm_is_scaled_under_16_mixed() -> None:
    src = """
    import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def on_after_backward(self):
            for name, p in self.named_parameters():
                if p.grad is not None:
                    self.log(name, p.grad.norm())

        def on_before_optimizer_step(self, optimizer):
            for name, p in self.named_parameters():
                self.log(name, p.grad.norm())
    """
    # on_before_optimizer_step runs after the precision plugin unscaled: fine.
    assert _lines(src, "AMP112") == [7]


def test_amp112_accelerate_norm_before_its_clip_is_reported_after_it_is_not() -> None:
    src = """
    import torch

    for batch in loader:
        loss = model(batch).mean()
        accelerator.backward(loss)
        before = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        after = accelerator.clip_grad_norm_(model.parameters(), 1.0)
        again = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
    """
    assert _lines(src, "AMP112") == [6]


def test_amp112_infinite_clip_is_amp112_and_not_amp101() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    """
    assert _lines(src, "AMP112") == [4]
    assert _lines(src, "AMP101") == [5]


def test_amp112_norm_of_weights_or_of_a_plain_backward_is_not_reported() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    loss.backward()
    plain = sum(p.grad.norm() for p in model.parameters())
    scaler.scale(loss).backward()
    weights = sum(p.norm() for p in model.parameters())
    scaler.unscale_(optimizer)
    unscaled = sum(p.grad.norm() for p in model.parameters())
    scaler.step(optimizer)
    scaler.update()
    """
    assert _lines(src, "AMP112") == []


# --- AMP109 unscale-step-mismatch -------------------------------------------------------------


def test_amp109_an_alias_of_the_same_optimizer_is_not_a_wrapper() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    opt = optimizer
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(optimizer)
    scaler.update()
    """
    assert _lines(src, "AMP109") == []


def test_amp109_unscaling_the_wrapper_and_stepping_the_inner_optimizer_is_reported() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    scaler.unscale_(wrapper)
    scaler.step(wrapper.optimizer)
    scaler.update()
    """
    assert _lines(src, "AMP109") == [5]


def test_amp109_two_optimizers_of_two_models_are_not_wrappers() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    scaler.unscale_(opt_a)
    scaler.step(opt_b)
    scaler.update()
    """
    assert _lines(src, "AMP109") == []


AMP109_WRAPPER = """
import torch

class Wrapper:
    def __init__(self, base, other):
        self._inner = base
        self.other = other
{members}

scaler = torch.amp.GradScaler("cuda")
wrapper = Wrapper(torch.optim.SGD(a.parameters()), torch.optim.SGD(b.parameters()))
scaler.scale(loss).backward()
scaler.unscale_(wrapper.{unscaled})
scaler.step(wrapper)
scaler.update()
"""

_INNER_PROPERTY = "    @property\n    def optimizer(self):\n        return self._inner\n"


@pytest.mark.parametrize(
    "members, unscaled, reported",
    [
        # param_groups forwarded to the unscaled object: the same parameters, unscaled twice
        ("    @property\n    def param_groups(self):\n        return self._inner.param_groups\n", "_inner", True),
        (_INNER_PROPERTY + "    @property\n    def param_groups(self):\n        return self._inner.param_groups\n", "optimizer", True),
        ("        self.param_groups = self._inner.param_groups\n".replace("        ", "    def f(self):\n        ", 1), "_inner", True),
        ("    pass\n", "_inner", True),  # nothing says where its parameters are: as before
        # param_groups of another attribute: different parameters
        ("    @property\n    def param_groups(self):\n        return self.other.param_groups\n", "_inner", False),
        (_INNER_PROPERTY + "    @property\n    def param_groups(self):\n        return self.other.param_groups\n", "optimizer", False),
    ],
)
def test_amp109_a_wrapper_is_judged_by_where_it_forwards_param_groups(members, unscaled, reported) -> None:
    src = AMP109_WRAPPER.format(members=members, unscaled=unscaled)
    assert bool(_lines(src, "AMP109")) is reported


# --- AMP110 scaler-state-not-in-state-dict -----------------------------------------------------


def test_amp110_scaler_read_through_a_property_or_a_helper_counts_as_saved() -> None:
    src = """
    import torch

    class Wrapper:
        def __init__(self, optimizer):
            self.optimizer = optimizer
            self._scaler = torch.amp.GradScaler("cuda")

        @property
        def scaler(self):
            return self._scaler

        def _extra_state(self):
            return {"scaler": self.scaler.state_dict()}

        def state_dict(self):
            return {"optimizer": self.optimizer.state_dict(), **self._extra_state()}

        def load_state_dict(self, state):
            self.optimizer.load_state_dict(state["optimizer"])
            getattr(self, "_scaler").load_state_dict(state["scaler"])
    """
    assert _lines(src, "AMP110") == []


def test_amp110_disabled_scaler_or_external_base_is_not_reported() -> None:
    src = """
    import torch

    class NoAmp:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda", enabled=False)

        def state_dict(self):
            return {}

    class FusedOptimizer(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})
            self.scaler = torch.amp.GradScaler("cuda")
    """
    assert _lines(src, "AMP110") == []


def test_amp110_inherited_from_a_base_in_the_same_module_is_reported_at_the_class() -> None:
    src = """
    import torch

    class Base:
        def state_dict(self):
            return self.optimizer.state_dict()

    class Amp(Base):
        def __init__(self, optimizer):
            self.optimizer = optimizer
            self.scaler = torch.amp.GradScaler("cuda")
    """
    assert _lines(src, "AMP110") == [7]


# --- AMP206 scaler-without-autocast -------------------------------------------------------------

_SCRIPT = """
import torch
scaler = torch.amp.GradScaler("cuda")
{extra}
for x in loader:
    loss = model(x).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def test_amp206_reduced_precision_anywhere_in_the_module_keeps_it_silent() -> None:
    assert _lines(_SCRIPT.format(extra=""), "AMP206") == [2]
    for extra in (
        "model.half()",
        "model.to(torch.bfloat16)",
        'accelerator = Accelerator(mixed_precision="fp16")',
        'trainer = Trainer(precision="16-mixed")',
        "ctx = torch.autocast",
        "from apex import amp",
    ):
        assert _lines(_SCRIPT.format(extra=extra), "AMP206") == [], extra


def test_amp206_a_scaler_that_scales_nothing_here_is_not_reported() -> None:
    src = """
    import torch

    def build_scaler():
        return torch.amp.GradScaler("cuda")

    class NativeScaler:
        def __init__(self):
            self._scaler = torch.amp.GradScaler("cuda")

        def __call__(self, loss, optimizer):
            self._scaler.scale(loss).backward()
            self._scaler.step(optimizer)
            self._scaler.update()
    """
    # A factory, and a helper class that nothing in the program instantiates (a library's).
    assert _lines(src, "AMP206") == []


def test_amp206_a_helper_class_built_in_its_own_module_is_reported() -> None:
    src = """
    import torch

    class NativeScaler:
        def __init__(self):
            self._scaler = torch.amp.GradScaler("cuda")

        def __call__(self, loss, optimizer):
            self._scaler.scale(loss).backward()
            self._scaler.step(optimizer)
            self._scaler.update()

    loss_scaler = NativeScaler()
    """
    assert _lines(src, "AMP206") == [5]


# --- AMP305 trains-a-cast-copy -------------------------------------------------------------------


def test_amp305_device_moves_frozen_copies_and_data_assignment_are_not_reported() -> None:
    src = """
    import torch
    for p in model.parameters():
        p = p.to(device)
        p.requires_grad = True
    for p in model.parameters():
        p = p.float()
        p.requires_grad = False
    for p in model.parameters():
        p.data = p.data.float()
        p.requires_grad = True
    """
    assert _lines(src, "AMP305") == []


def test_amp305_weight_upcast_copy_handed_to_the_optimizer_is_reported() -> None:
    src = """
    import torch
    emb = text_encoder.get_input_embeddings().weight
    emb = emb.to(dtype=torch.float32)
    optimizer = torch.optim.AdamW([emb], lr=1e-3)
    """
    assert _lines(src, "AMP305") == [3]


def test_amp305_parameter_replaced_after_the_optimizer_was_built_is_reported() -> None:
    src = """
    import torch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head.weight = torch.nn.Parameter(model.head.weight.float())
    """
    before = """
    import torch
    model.head.weight = torch.nn.Parameter(model.head.weight.float())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    assert _lines(src, "AMP305") == [3]
    assert _lines(before, "AMP305") == []


_GRAD_NORM_CALLBACK = """
import lightning.pytorch as pl


class GradNormMonitor(pl.Callback):
    pass


class Model(pl.LightningModule):
    def on_after_backward(self):
        norms = [p.grad.norm() for p in self.parameters() if p.grad is not None]
        self.log("grad_norm", sum(norms))
"""


@pytest.mark.parametrize("configs, reported", [
    # Hydra / Lightning CLI configs of the project: bf16 only, nothing is scaled
    ({"configs/base.yaml": "trainer:\n  precision: bf16-mixed\n",
      "configs/finetune.yaml": "trainer:\n  precision: bf16-true\n"}, False),
    ({"configs/base.yaml": "trainer:\n  precision: bf16-mixed\n",
      "configs/fp16.yaml": "trainer:\n  precision: 16-mixed\n"}, True),
    ({"train.py": "import lightning.pytorch as pl\ntrainer = pl.Trainer(precision='bf16-mixed')\n"}, False),
    ({"train.py": "import lightning.pytorch as pl\ntrainer = pl.Trainer(precision=args.precision)\n",
      "configs/base.yaml": "trainer:\n  precision: bf16-mixed\n"}, True),  # decided at run time
    ({}, True),  # no precision set anywhere: it may be 16-mixed on the command line
])
def test_amp112_on_after_backward_follows_the_precision_the_project_configures(
        a_project_of_its_own: Path, configs: dict[str, str], reported: bool) -> None:
    """fishaudio/fish-speech (dev batch 9): a grad-norm callback in `on_after_backward` under a
    Trainer whose every configured precision is bf16 reads unscaled gradients."""
    for name, text in configs.items():
        (a_project_of_its_own / name).parent.mkdir(parents=True, exist_ok=True)
        (a_project_of_its_own / name).write_text(text)
    path = a_project_of_its_own / "model.py"
    path.write_text(textwrap.dedent(_GRAD_NORM_CALLBACK).lstrip("\n"))
    assert bool(_lines(_GRAD_NORM_CALLBACK, "AMP112", str(path))) is reported
