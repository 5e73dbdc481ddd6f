"""The step rules follow scalers and optimizers by name: where a name does not provably denote
one object (an alias, a container, a constructor that keeps it, a name bound again between two
calls), or a statement shares its line, or a `try` catches what a call raises, they neither
guess a finding nor fix.  Reproducers of a hostile review (D5-D11); the fixes also run in
tests/runtime/test_fix_execution.py (`_step_rule_variants`)."""

from __future__ import annotations

import textwrap

from amplint.engine import check_source

HEAD = """\
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
"""


def _found(source: str, code: str):
    return [d for d in check_source(textwrap.dedent(source), "t.py", select=[code]) if d.code == code]


def _loop(before: str, body: str) -> str:
    return HEAD + textwrap.dedent(before) + "for x in loader:\n" + textwrap.indent(textwrap.dedent(body), "    ")


# --- D9: AMP102, a scaler updated under another name -------------------------------------------

STEP = """\
with torch.autocast("cpu", dtype=torch.float16):
    loss = model(x).mean()
scaler.scale(loss).backward()
scaler.step(optimizer)
optimizer.zero_grad()
"""


def test_amp102_update_through_an_alias_is_an_update() -> None:
    assert _found(_loop("s = scaler\n", STEP + "s.update()\n"), "AMP102") == []


def test_amp102_bound_update_in_a_list_is_an_update() -> None:
    assert _found(_loop("hooks = [scaler.update]\n", STEP + "for h in hooks:\n    h()\n"), "AMP102") == []


def test_amp102_scaler_kept_by_a_constructor_is_updated_there() -> None:
    box = "class Box:\n    def __init__(self, sc):\n        self.sc = sc\n    def finish(self):\n        self.sc.update()\nbox = Box(scaler)\n"
    assert _found(_loop(box, STEP + "box.finish()\n"), "AMP102") == []


def test_amp102_scaler_passed_to_an_unknown_call_may_be_updated_there() -> None:
    assert _found(_loop("", STEP + "finish_step(scaler)\n"), "AMP102") == []


def test_amp102_reads_that_keep_the_scaler_still_fire_and_fix() -> None:
    """A test, `print`, `isinstance`: the scaler stays in sight, and the fix is offered.
    Handed to a project helper it is still reported, but a helper (or one it calls, deeper
    than the analysis follows) may update it: no fix without evidence."""
    body = STEP + "if scaler is not None and isinstance(scaler, torch.amp.GradScaler):\n    print(scaler)\n"
    (found,) = _found(_loop("", body), "AMP102")
    assert found.fix is not None
    helper = "def log(s):\n    print(s.get_scale())\n"
    (found,) = _found(_loop(helper, body + "log(scaler)\n"), "AMP102")
    assert found.fix is None


# --- D5, D6: AMP101's fix (insert `scaler.unscale_(optimizer)` before the clip) ----------------

BACKWARD = """\
with torch.autocast("cpu", dtype=torch.float16):
    loss = model(x).mean()
"""


def _amp101(body: str):
    (found,) = _found(_loop("", BACKWARD + body), "AMP101")
    return found


def test_amp101_clip_on_the_backward_line_is_reported_without_fix() -> None:
    """The insertion went before the line, so before the backward too (and again on every pass)."""
    found = _amp101("scaler.scale(loss).backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                    "scaler.step(optimizer)\nscaler.update()\n")
    assert found.fix is None


def test_amp101_clip_between_semicolons_is_reported_without_fix() -> None:
    found = _amp101("scaler.scale(loss).backward()\n"
                    "n = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); scaler.step(optimizer)\nscaler.update()\n")
    assert found.fix is None


def test_amp101_optimizer_bound_again_between_clip_and_step_gets_no_fix() -> None:
    found = _amp101("optimizer = o1\nscaler.scale(loss).backward()\n"
                    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\noptimizer = o2\n"
                    "scaler.step(optimizer)\nscaler.update()\n")
    assert found.fix is None


def test_amp101_plain_clip_still_gets_its_fix() -> None:
    found = _amp101("optimizer = o1\nscaler.scale(loss).backward()\n"
                    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                    "scaler.step(optimizer)\nscaler.update()\n")
    assert found.fix is not None


# --- D7, D8: AMP108 (a second `unscale_` of the same optimizer) -------------------------------

UNSCALED = BACKWARD + "scaler.scale(loss).backward()\n"


def test_amp108_optimizer_name_bound_again_between_is_another_optimizer() -> None:
    body = UNSCALED + "optimizer = o1\nscaler.unscale_(optimizer)\noptimizer = o2\nscaler.unscale_(optimizer)\n"
    assert _found(_loop("", body + "scaler.step(o1)\nscaler.step(o2)\nscaler.update()\n"), "AMP108") == []


def test_amp108_same_optimizer_twice_still_fires_and_fixes() -> None:
    body = UNSCALED + "optimizer = o1\nscaler.unscale_(optimizer)\nn = 1\nscaler.unscale_(optimizer)\n"
    (found,) = _found(_loop("", body + "scaler.step(optimizer)\nscaler.update()\n"), "AMP108")
    assert found.fix is not None


def test_amp108_second_unscale_in_a_try_that_catches_runtime_error_is_not_removed() -> None:
    for handler in ("RuntimeError", "Exception", "(ValueError, RuntimeError)", "BaseException", ""):
        body = (UNSCALED + "scaler.unscale_(optimizer)\ntry:\n    scaler.unscale_(optimizer)\n    print('again')\n"
                f"except {handler}:\n    print('already')\n" + "scaler.step(optimizer)\nscaler.update()\n")
        (found,) = _found(_loop("", body.replace("except :", "except:")), "AMP108")
        assert found.fix is None, handler


def test_amp108_a_try_that_cannot_catch_it_keeps_the_fix() -> None:
    body = (UNSCALED + "scaler.unscale_(optimizer)\ntry:\n    scaler.unscale_(optimizer)\n    print('again')\n"
            "except KeyError:\n    print('no')\n" + "scaler.step(optimizer)\nscaler.update()\n")
    (found,) = _found(_loop("", body), "AMP108")
    assert found.fix is not None


# --- D10: AMP103, a loss scaled under another name ---------------------------------------------

TWO_LOSSES = """\
with torch.autocast("cpu", dtype=torch.float16):
    l1 = model(x).mean()
    l2 = model(x).abs().mean()
"""
STEPPED = "scaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()\n"


def test_amp103_loss_scaled_through_an_alias_of_the_scaler_is_scaled() -> None:
    assert _found(_loop("s = scaler\n", TWO_LOSSES + "loss = s.scale(l1)\nloss.backward()\n" + STEPPED), "AMP103") == []


def test_amp103_elements_of_a_scaled_list_are_scaled() -> None:
    body = TWO_LOSSES + "scaled = scaler.scale([l1, l2])\n(scaled[0] + scaled[1]).backward()\n"
    assert _found(_loop("", body + STEPPED), "AMP103") == []


def test_amp103_the_bound_scale_method_scales() -> None:
    assert _found(_loop("scale = scaler.scale\n", TWO_LOSSES + "scale(l1).backward()\n" + STEPPED), "AMP103") == []


def test_amp103_an_unscaled_loss_beside_an_alias_still_fires() -> None:
    """Reported; but the fix asks for positive evidence that no loss is scaled already, and
    an alias of the scaler could have scaled one out of sight: no fix."""
    (found,) = _found(_loop("s = scaler\n", TWO_LOSSES + "l1.backward()\n" + STEPPED), "AMP103")
    assert found.fix is None
    (found,) = _found(_loop("", TWO_LOSSES + "print(scaler)\nl1.backward()\n" + STEPPED), "AMP103")
    assert found.fix is not None  # a builtin that only reads it keeps the scaler in sight


# --- D11: AMP302 keeps its finding, offers no fix ----------------------------------------------


def test_amp302_input_cast_is_reported_without_fix() -> None:
    """The input's dtype is unknown: float64 or integer inputs, or a copy mutated in place,
    behave otherwise once the cast is gone."""
    src = HEAD + ("with torch.autocast('cpu', dtype=torch.bfloat16):\n    out = model(x64.bfloat16())\n"
                  "    y = x.to(torch.bfloat16)\n    y.mul_(0)\n")
    found = _found(src, "AMP302")
    assert len(found) == 2 and all(d.fix is None for d in found)
