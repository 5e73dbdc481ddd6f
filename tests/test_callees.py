"""Which class an expression holds an instance of (amplint/analysis/callees.py), from what is
assigned to it and, when that is out of sight, from its annotation."""

from __future__ import annotations

import textwrap

import libcst as cst

from amplint.analysis.callees import class_of_instance
from amplint.analysis.model import ModuleModel

CLASSES = """
class Strategy:
    def backward(self, loss): ...
class Amp(Strategy):
    def backward(self, loss): ...
"""


def _class_in(source: str, scope_name: str, name: str):
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(CLASSES + source)))
    scope = next(s for s in model.scopes if s.name == scope_name)
    found = class_of_instance(cst.Name(name), scope)
    return None if found is None else found.name


def test_an_annotated_variable_whose_value_is_a_factory_call_holds_the_annotated_class() -> None:
    assert _class_in("def train(cfg):\n    s: Strategy = make(cfg)\n", "train", "s") == "Strategy"


def test_a_parameter_annotation_names_the_class() -> None:
    assert _class_in("def train(s: Strategy):\n    pass\n", "train", "s") == "Strategy"
    assert _class_in("def train(s: 'Strategy'):\n    pass\n", "train", "s") == "Strategy"


def test_what_is_assigned_wins_over_the_annotation() -> None:
    assert _class_in("def train():\n    s: Strategy = Amp()\n", "train", "s") == "Amp"


def test_an_annotation_of_no_project_class_tells_nothing() -> None:
    assert _class_in("def train(cfg):\n    s: torch.amp.GradScaler = make(cfg)\n", "train", "s") is None
    assert _class_in("def train(s: Optional[Strategy]):\n    pass\n", "train", "s") is None


def test_an_inner_binding_without_annotation_hides_the_outer_annotation() -> None:
    source = "s: Strategy = make()\ndef train(cfg):\n    s = make(cfg)\n"
    assert _class_in(source, "train", "s") is None
    assert _class_in(source, "<module>", "s") == "Strategy"
