"""Where the default dtype is set (amplint/analysis/default_dtype.py) and the dtypes a
value can hold through maps, `.get` and functions (amplint/analysis/values.py): the model
that AMP303 reads, also across the modules of a project."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.analysis.default_dtype import builds_only_frozen_modules, creates_parameters, default_dtype_sets
from amplint.analysis.model import ModuleModel
from amplint.config import Config
from amplint.engine import check_source
from amplint.project import index as project_index
from amplint.runner import check_paths

HELPER = '''
import contextlib
import torch

@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)
'''

TRAINING = '''
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(2, 8)).sum().backward()
optimizer.step()
'''


def build(src: str) -> ModuleModel:
    return ModuleModel.build(cst.parse_module(textwrap.dedent(src)))


def dtypes_of_sets(model: ModuleModel) -> list[frozenset[str] | None]:
    return [model.bindings.values.dtypes(s.dtype, s.scope) for s in default_dtype_sets(model)]


def amp303_lines(src: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(src), "<string>", select=["AMP303"])]


def line_of(src: str, text: str) -> int:
    """The 1-based line of the first line of `src` that contains `text`."""
    return next(i for i, line in enumerate(textwrap.dedent(src).splitlines(), 1) if text in line)


@pytest.fixture(autouse=True)
def _fresh_index():
    project_index.reset_shared()
    yield
    project_index.reset_shared()


# --- parameter sinks ------------------------------------------------------------------------


def test_a_helper_that_passes_its_parameter_on_sets_the_default_dtype() -> None:
    model = build(HELPER + "with default_dtype(torch.bfloat16):\n    model = torch.nn.Linear(8, 1)\n")
    # the two calls inside the helper (its parameter, the saved dtype) and the helper's call
    assert dtypes_of_sets(model)[-1] == frozenset({"bfloat16"})
    assert [s.helper is not None for s in default_dtype_sets(model)] == [False, False, True]


def test_two_helper_levels_and_keyword_arguments() -> None:
    model = build('''
        import torch

        def _apply(d):
            torch.set_default_dtype(d)

        def precision(*, dtype):
            _apply(dtype)

        precision(dtype=torch.float16)
    ''')
    sets = [s for s in default_dtype_sets(model) if s.helper is not None and s.helper.fn.name.value == "precision"]
    assert len(sets) == 1
    assert model.bindings.values.dtypes(sets[0].dtype, sets[0].scope) == frozenset({"float16"})
    assert sets[0].sink.call is not None  # the note points at `torch.set_default_dtype(d)`


@pytest.mark.parametrize(
    "body",
    [
        "torch.set_default_dtype(torch.float32)",  # a constant: the argument is not passed on
        "d = torch.float32\n    torch.set_default_dtype(d)",  # a local, not the parameter
        "print(dtype)",  # no set_default_dtype at all
    ],
)
def test_helpers_that_are_no_sinks(body: str) -> None:
    model = build(f"import torch\n\ndef helper(dtype):\n    {body}\n\nhelper(torch.bfloat16)\n")
    assert all(s.helper is None for s in default_dtype_sets(model))


def test_a_recursive_helper_terminates() -> None:
    model = build("import torch\n\ndef helper(dtype):\n    helper(dtype)\n\nhelper(torch.bfloat16)\n")
    assert default_dtype_sets(model) == []


# --- values: maps, .get, functions, attributes ---------------------------------------------


@pytest.mark.parametrize(
    "expr, expected",
    [
        ('MAP["bf16"]', {"bfloat16", "float32"}),
        ('MAP.get(name, torch.float64)', {"bfloat16", "float32", "float64"}),
        ("MAP.get(name, name)", {"bfloat16", "float32"}),  # an unknown default adds nothing
        ("get_dtype(name)", {"bfloat16", "float32"}),  # the union of its returns
        ("self_free()", None),  # a call we cannot follow is unknown
    ],
)
def test_dtypes_through_maps_and_functions(expr: str, expected) -> None:
    model = build(f'''
        import torch
        MAP = {{"bf16": torch.bfloat16, "fp32": torch.float32}}

        def get_dtype(name=None):
            if name is None:
                return torch.float32
            found = MAP.get(name, name)
            return found

        value = {expr}
    ''')
    (value,) = model.module_scope.assignments["value"]
    got = model.bindings.values.dtypes(value, model.module_scope)
    assert got == (frozenset(expected) if expected is not None else None)


def test_an_attribute_set_in_init_from_a_dtype_function() -> None:
    src = HELPER + '''
MAP = {"bf16": torch.bfloat16, "fp32": torch.float32}

def get_dtype(name):
    return MAP.get(name, name)

class Recipe:
    def __init__(self, cfg):
        self._dtype = get_dtype(cfg["dtype"])

    def setup(self):
        with default_dtype(self._dtype):
            self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
'''
    assert amp303_lines(src) == [line_of(src, "with default_dtype(self._dtype)")]


def test_full_precision_only_is_silent() -> None:
    assert amp303_lines(HELPER + "MAP = {'a': torch.float32, 'b': torch.float64}\nwith default_dtype(MAP['a']):\n    model = torch.nn.Linear(8, 1)\n" + TRAINING) == []


# --- frozen modules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "after, frozen",
    [
        ("model.eval()", True),
        ("model.requires_grad_(False)", True),
        ("for p in model.parameters():\n        p.requires_grad = False", True),
        ("model.eval()\n    model.train()", False),  # back in training
        ("pass", False),
    ],
)
def test_a_region_that_builds_only_frozen_modules(after: str, frozen: bool) -> None:
    model = build(HELPER + f"\ndef build():\n    with default_dtype(torch.bfloat16):\n        model = torch.nn.Linear(8, 1)\n    {after}\n    return model\n")
    (site,) = [s for s in default_dtype_sets(model) if s.helper is not None]
    assert builds_only_frozen_modules(site) is frozen


def test_a_region_that_builds_the_policy_and_its_frozen_reference_is_reported() -> None:
    src = HELPER + '''
def build():
    with default_dtype(torch.bfloat16):
        policy = torch.nn.Linear(8, 1)
        reference = torch.nn.Linear(8, 1)
    reference.eval()
    return policy, reference

model, reference = build()
''' + TRAINING
    assert amp303_lines(src) == [line_of(src, "with default_dtype(torch.bfloat16)")]


def test_a_region_that_only_works_on_a_frozen_module_is_silent() -> None:
    # torchtune's `with set_default_dtype(...): for m in model.modules(): m.rope_init()`
    lines = amp303_lines(HELPER + '''
def build():
    with default_dtype(torch.bfloat16):
        model = torch.nn.Linear(8, 1)
    with default_dtype(torch.bfloat16):
        for m in model.modules():
            m.reset_parameters()
    model.eval()
    return model

reference = build()
model = torch.nn.Linear(8, 1)
''' + TRAINING)
    assert lines == []


# --- what a region creates ---------------------------------------------------------------

CLASSES = """
class Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def rope_init(self):
        self.register_buffer("theta", torch.arange(4).float() ** 2, persistent=False)

    def grow(self):
        self.extra = torch.nn.Parameter(torch.zeros(8))

    def rebuild(self):
        self.proj = make_layer()

    def renew(self):
        self.grow()


def make_layer():
    return torch.nn.Linear(8, 8)


def recompute(module):
    module.rope_init()

model = Cached()
"""


@pytest.mark.parametrize(
    "body, creates",
    [
        # method calls on modules that exist: caches and values recomputed, no new parameter
        ("for m in model.modules():\n        if hasattr(m, 'rope_init'):\n            m.rope_init()", False),
        ("for m in model.modules():\n        m.to_empty(device='cpu')\n        m.reset_parameters()", False),
        ("model.rope_init()", False),  # read: a buffer only
        ("recompute(model)", False),  # a helper that calls it, followed
        ("torch.nn.init.normal_(model.proj.weight)", False),  # torch functions build nothing
        # what does build a parameter, also through the methods and helpers it calls
        ("model.grow()", True),
        ("model.renew()", True),
        ("model.rebuild()", True),
        ("layer = make_layer()", True),
        ("model.head = torch.nn.Linear(8, 2)", True),
        ("model.bias = torch.nn.Parameter(torch.zeros(8))", True),
        ("other = Cached()", True),
        # what cannot be followed counts as building
        ("build_everything(model)", True),  # not defined anywhere
        ("extra = model.make_extra()", True),  # a new object bound from an unknown method
        ("model = transformers.AutoModel.from_pretrained('x')", True),  # another library's factory
    ],
)
def test_what_a_region_creates(body: str, creates: bool) -> None:
    src = HELPER + "import transformers\n" + CLASSES + f"\nwith default_dtype(torch.bfloat16):\n    {body}\n"
    model = build(src)
    (site,) = [s for s in default_dtype_sets(model) if s.helper is not None]
    assert creates_parameters(site) is creates


def test_a_default_dtype_set_outside_a_with_reaches_everything_after_it() -> None:
    src = "import torch\nmodel = torch.nn.Linear(8, 1)\ntorch.set_default_dtype(torch.bfloat16)\nmodel.reset_parameters()\n"
    (site,) = default_dtype_sets(build(src))
    assert creates_parameters(site) is True


def test_a_region_that_recomputes_caches_after_the_reported_build_is_silent() -> None:
    # torchtune's distributed recipes: built on the meta device in bf16 (reported), sharded,
    # then a second bf16 region only re-initialises the RoPE caches (silent)
    src = HELPER + '''
def setup():
    with default_dtype(torch.bfloat16), torch.device("meta"):
        model = torch.nn.Linear(8, 1)
    with default_dtype(torch.bfloat16):
        for m in model.modules():
            if hasattr(m, "rope_init"):
                m.rope_init()
    return model

model = setup()
''' + TRAINING
    assert amp303_lines(src) == [line_of(src, 'torch.device("meta")')]


# --- across modules, one file at a time -------------------------------------------------------


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def test_a_script_that_never_names_set_default_dtype_nor_a_half_dtype(tmp_path: Path) -> None:
    """The pre-filter lets AMP303 run when the call and the dtype come from imported code."""
    project = _project(tmp_path, {
        "precision.py": HELPER.replace("def default_dtype", "def precision_scope")
        + "\nPRECISIONS = {'low': torch.bfloat16, 'full': torch.float32}\n",
        "train.py": '''
            import torch
            from precision import PRECISIONS, precision_scope

            with precision_scope(PRECISIONS["low"]):
                model = torch.nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(2, 8)).sum().backward()
            optimizer.step()
        ''',
    })
    train = project / "train.py"
    assert "set_default_dtype" not in train.read_text() and "16" not in train.read_text()
    result = check_paths([train], Config(root=project, select=("AMP303",)), jobs=1)
    found = [(Path(d.path).name, d.span.line, d.code) for d in result.diagnostics]
    assert found == [("train.py", 5, "AMP303")]
    assert any("precision.py" in str(r) for d in result.diagnostics for r in d.related)
