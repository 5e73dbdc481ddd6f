"""Reproducers of the eighth hostile pass: where a positive-evidence fix still changed a program.

The pass attacked the evidence the seventh pass's fixes asked for. AMP401: a module that
reaches its own names through frames or by module name (`sys._getframe().f_globals`,
`import __main__`, `importlib.import_module(__name__)`), another module that resolves them
by a string (`pkgutil.resolve_name("amp_utils:GradScaler")`), a star import that may bind
`torch` again. AMP501: a layer whose call a forward hook or a replaced `forward` changes, an
integer embedding table, a `for` target, a module global set by an importer,
`torch.utils.swap_tensors`, `a.data, b.data = ...`, `.view(getattr(torch, "int32"))`.
AMP201: a loss read through a property, `__getitem__` or `__getattr__` that runs the model.
AMP103: a plain `opt_d.step()` beside `scaler.step(opt_g)`. AMP102: an optimizer that takes
the scaler and updates it itself. Each must now get no fix, or one that changes nothing.
"""

CASES: dict[str, dict[str, str]] = {
    "AMP102-optimizer_takes_grad_scaler": {
        "train.py": '''\
import torch
import torch.nn as nn


class ScalingSGD(torch.optim.SGD):
    """An optimizer that handles AMP scaling itself (like torch's fused optimizers)."""
    _step_supports_amp_scaling = True

    def step(self, closure=None, grad_scaler=None):
        if grad_scaler is not None:
            grad_scaler.unscale_(self)
            found = sum(v.item() for v in grad_scaler._check_inf_per_device(self).values())
            if not found:
                super().step(closure)
            grad_scaler.update()
            return None
        return super().step(closure)


torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = ScalingSGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
for i in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(8, 4)).float().mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    opt.zero_grad()
print("scale", scaler.get_scale())
''',
    },
    "AMP103-other_params_plain_step": {
        "train.py": '''\
import torch
import torch.nn as nn

torch.manual_seed(0)
gen = nn.Linear(4, 4)
disc = nn.Linear(4, 1)
opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for i in range(3):
    x = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        g_loss = gen(x).float().pow(2).mean()
        d_loss = disc(x).float().mean()
    scaler.scale(g_loss).backward()
    d_loss.backward()
    scaler.step(opt_g)
    scaler.update()
    opt_d.step()
    opt_g.zero_grad()
    opt_d.zero_grad()
print("disc", round(disc.weight.sum().item(), 3))
''',
    },
    "AMP201-getattr_lazy": {
        "train.py": '''\
import torch
import torch.nn as nn

class Out:
    def __init__(self, model, x):
        self.model, self.x = model, x

    def __getattr__(self, name):
        if name == "loss":
            return self.model(self.x).float().pow(2).mean()
        raise AttributeError(name)

model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(2):
    out = Out(model, torch.randn(2, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        warm = model(out.x)
        out.loss.backward()
    opt.step()
    opt.zero_grad()
''',
    },
    "AMP201-getitem_loss": {
        "train.py": '''\
import torch
import torch.nn as nn

class Losses:
    def __init__(self, model, xs):
        self.model, self.xs = model, xs

    def __getitem__(self, i):
        return self.model(self.xs[i]).float().pow(2).mean()

model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = Losses(model, [torch.randn(2, 4) for _ in range(3)])
for i in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        warm = model(losses.xs[i])
        losses[i].backward()
    opt.step()
    opt.zero_grad()
''',
    },
    "AMP201-property_loss": {
        "train.py": '''\
import torch
import torch.nn as nn

class Batch:
    def __init__(self, model, x):
        self.model, self.x = model, x

    @property
    def loss(self):
        return self.model(self.x).float().pow(2).mean()

model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    b = Batch(model, torch.randn(2, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pre = model(b.x)
        b.loss.backward()
    opt.step()
    opt.zero_grad()
print(model.weight.dtype)
''',
    },
    "AMP401-f_globals_lookup": {
        "train.py": '''\
import sys
import torch
from torch.cpu.amp import GradScaler

s = GradScaler(init_scale=8.0)
frame = sys._getframe()
make = frame.f_globals["GradScaler"]
t = make(4.0)
print("scale", t.get_scale())
''',
    },
    "AMP401-import_main_self": {
        "train.py": '''\
import torch
import __main__
from torch.cpu.amp import GradScaler

s = GradScaler(init_scale=8.0)
t = __main__.GradScaler(4.0)
print("scale", t.get_scale())
''',
    },
    "AMP401-import_module_name": {
        "train.py": '''\
import importlib
import torch
from torch.cpu.amp import GradScaler

s = GradScaler(init_scale=8.0)
me = importlib.import_module(__name__)
t = me.GradScaler(4.0)
print("scale", t.get_scale())
''',
    },
    "AMP401-pkgutil_resolve_name": {
        "amp_utils.py": '''\
import torch
from torch.cpu.amp import GradScaler


def default_scaler():
    return GradScaler(init_scale=8.0)
''',
        "train.py": '''\
import pkgutil
import pydoc

cls = pkgutil.resolve_name("amp_utils:GradScaler")
s = cls(4.0)
t = pydoc.locate("amp_utils.GradScaler")(2.0)
print("scales", s.get_scale(), t.get_scale())
''',
    },
    "AMP401-star_import_torch_name": {
        "helpers.py": '''\
import torch as _real
class _Shim:
    def __getattr__(self, k):
        if k == "bfloat16":
            return _real.float32
        return getattr(_real, k)
torch = _Shim()
''',
        "train.py": '''\
import torch
from helpers import *
from torch.cpu.amp import autocast
m = torch.nn.Linear(4, 4)
with autocast():
    y = m(torch.ones(2, 4))
print(y.dtype)
''',
    },
    "AMP501-data_tuple_target": {
        "train.py": '''\
import torch
bias = torch.randn(4).half()
other = torch.randn(4)
bias.data, other.data = bias.data.argsort(), other.data
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
z = torch.ones(2).half()
print(out.dtype, out.tolist())
''',
    },
    "AMP501-embedding_frozen_int": {
        "train.py": '''\
import torch
import torch.nn as nn
emb = nn.Embedding(10, 4, _weight=torch.arange(40).view(10, 4), _freeze=True)
h = emb(torch.tensor([1, 2]))
y = h.masked_fill(h > 10, -1e9)
z = torch.ones(2).half()
print(y.dtype, y.tolist())
''',
    },
    "AMP501-for_target_module": {
        "train.py": '''\
import torch
bias = torch.zeros(4).half()
for bias in [torch.arange(4)]:
    pass
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
z = torch.ones(2).half()
print(out.dtype, out.tolist())
''',
    },
    "AMP501-forward_hook_int": {
        "train.py": '''\
import torch
import torch.nn as nn
proj = nn.Linear(4, 4)
proj.register_forward_hook(lambda mod, inp, out: (out * 100).long())
x = torch.randn(2, 4)
h = proj(x)
m = h > 0
y = h.masked_fill(m, -1e9)
z = x.half()
print(y.dtype)
''',
    },
    "AMP501-forward_patched": {
        "train.py": '''\
import torch
import torch.nn as nn
proj = nn.Linear(4, 4)
proj.forward = lambda t: torch.arange(t.numel()).view(t.shape)
x = torch.randn(2, 4)
h = proj(x)
y = h.masked_fill(h > 3, -1e9)
z = x.half()
print(y.dtype)
''',
    },
    "AMP501-set_from_importer": {
        "model.py": '''\
import torch
BIAS = torch.zeros(4).half()
HALF = torch.float16

def apply(m):
    return BIAS.masked_fill(m, -1e9)
''',
        "train.py": '''\
import torch
import model
model.BIAS = torch.arange(4)
print(model.apply(torch.tensor([True, False, True, False])).tolist())
''',
    },
    "AMP501-swap_tensors": {
        "train.py": '''\
import torch
bias = torch.zeros(4).half()
ids = torch.arange(4)
torch.utils.swap_tensors(bias, ids)
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
z = torch.ones(2).half()
print(out.dtype, out.tolist())
''',
    },
    "AMP501-view_getattr_dtype": {
        "train.py": '''\
import torch
x = torch.randn(4).half()
bits = x.view(getattr(torch, "int32"))
out = bits.masked_fill(bits > 0, -1e9 if False else -1e9)
out2 = bits.masked_fill(bits > 0, -1e4)
y = bits.masked_fill(bits < 0, -1e9)
print(y.dtype)
''',
    },
}
