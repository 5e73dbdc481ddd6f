"""Reproducers of the ninth hostile pass: where a positive-evidence fix still changed a program.

AMP401: a doctest in the module that calls the old name; annotations read back at run time
(`typing.get_type_hints` in a factory, `inspect.signature`, a metaclass, a checker or a
singledispatch registration applied by a call). AMP501: names and attributes rebound by
`globals()`, `exec`, `nonlocal`, `sys.modules[__name__]`, `__dict__`, a match capture, a
property, and `.view(dt)` with a parameter. AMP201: another object's `scale` method. AMP103:
a probe head updated by hand from `p.grad`. AMP102: two steps on one scaler. AMP101: two
optimizers sharing a parameter. AMP108: a property that gives another optimizer per read.
Each must now get no fix, or one that changes nothing.
"""

CASES: dict[str, dict[str, str]] = {
    "AMP101-shared_param_two_opts": {
        "train.py": '''\
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(4, 4)
opt_a = torch.optim.SGD([model.weight, model.bias], lr=0.1)
opt_b = torch.optim.SGD([model.bias], lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
for step in range(2):
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    opt_a.zero_grad()
    opt_b.zero_grad()
print(model.bias)
''',
    },
    "AMP102-two_optimizers_update_between": {
        "train.py": '''\
import torch
import torch.nn as nn
torch.manual_seed(0)
a = nn.Linear(4, 4)
b = nn.Linear(4, 4)
opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
a.weight.register_hook(lambda g: g * float("inf"))  # an overflow in the first layer
x = torch.randn(2, 4)
with torch.autocast("cpu", dtype=torch.float16):
    loss = b(a(x)).float().pow(2).mean()
scaler.scale(loss).backward()
scaler.step(opt_a)
scaler.step(opt_b)
opt_a.zero_grad()
opt_b.zero_grad()
print(b.weight.sum())
''',
    },
    "AMP103-manual_sgd_head": {
        "train.py": '''\
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(4, 4)
probe = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for step in range(2):
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        feat = model(x)
        loss = feat.float().pow(2).mean()
        ploss = probe(feat.detach().float()).pow(2).mean()
    scaler.scale(loss).backward()
    ploss.backward()
    with torch.no_grad():
        for p in probe.parameters():
            p -= 0.01 * p.grad
            p.grad = None
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print(probe.weight.sum())
''',
    },
    "AMP108-rotating_property": {
        "train.py": '''\
import torch
import torch.nn as nn
torch.manual_seed(0)
class T:
    def __init__(self):
        self.m = nn.Linear(4, 4)
        self.opts = [torch.optim.SGD([self.m.weight], lr=0.1), torch.optim.SGD([self.m.bias], lr=0.1)]
        self.i = 0
    @property
    def optimizer(self):
        self.i += 1
        return self.opts[self.i % 2]
t = T()
scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
with torch.autocast("cpu", dtype=torch.float16):
    loss = t.m(torch.randn(2, 4)).float().sum()
scaler.scale(loss).backward()
scaler.unscale_(t.optimizer)
scaler.unscale_(t.optimizer)
print(t.m.weight.grad)
''',
    },
    "AMP201-weigher_scale_method": {
        "train.py": '''\
import torch
import torch.nn as nn

class Weigher(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(1, 1)
    def scale(self, loss):
        return self.w(loss.float().reshape(1, 1)).sum()

model = nn.Linear(4, 4)
weigher = Weigher()
opt = torch.optim.SGD(list(model.parameters()) + list(weigher.parameters()), lr=0.1)
for step in range(2):
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
        weigher.scale(loss).backward()
    opt.step()
    opt.zero_grad()
print(model.weight.sum())
''',
    },
    "AMP401-doctest_in_module": {
        "train.py": '''\
"""Training utilities.

>>> s = GradScaler(4.0)
>>> s.get_scale()
4.0
"""
import doctest
import torch
from torch.cpu.amp import GradScaler

scaler = GradScaler(8.0)
print(scaler.get_scale())
print(doctest.testmod())
''',
    },
    "AMP401-metaclass_checks_fields": {
        "train.py": '''\
import torch
from torch.cpu.amp import GradScaler

class Checked(type):
    def __call__(cls, **kw):
        for k, t in cls.__annotations__.items():
            if not isinstance(kw[k], t):
                kw[k] = None
        obj = super().__call__()
        obj.__dict__.update(kw)
        return obj

class Parts(metaclass=Checked):
    scaler: GradScaler

p = Parts(scaler=torch.amp.GradScaler("cpu", 2.0))
print(p.scaler)
''',
    },
    "AMP401-signature_annotation": {
        "train.py": '''\
import inspect
import torch
from torch.cpu.amp import GradScaler

def train(scaler: GradScaler = None):
    return scaler

ann = inspect.signature(train).parameters["scaler"].annotation
s = ann(4.0)
print(s.get_scale())
''',
    },
    "AMP401-singledispatch_register_call": {
        "train.py": '''\
import functools
import torch
from torch.cpu.amp import GradScaler

@functools.singledispatch
def describe(obj):
    return "other"

def describe_scaler(obj: GradScaler):
    return "legacy scaler"

describe.register(describe_scaler)
s = torch.amp.GradScaler("cpu", 2.0)
print(describe(s))
''',
    },
    "AMP401-type_hints_factory": {
        "factory.py": '''\
import typing
def build(cls, **args):
    hints = typing.get_type_hints(cls)
    obj = cls()
    for name, kind in hints.items():
        setattr(obj, name, kind(*args[name]))
    return obj
''',
        "train.py": '''\
import torch
from torch.cpu.amp import GradScaler
from factory import build

class Components:
    scaler: GradScaler

c = build(Components, scaler=(4.0,))
print(type(c.scaler).__mro__[-2].__name__, c.scaler.get_scale(), c.scaler._device)
''',
    },
    "AMP401-validate_call_by_call": {
        "train.py": '''\
import torch
from torch.cpu.amp import GradScaler

def typechecked(fn):
    def wrapper(*a):
        for v, t in zip(a, fn.__annotations__.values()):
            if not isinstance(v, t):
                raise TypeError("bad")
        return fn(*a)
    return wrapper

def step(s: GradScaler):
    return "ok"

step = typechecked(step)
try:
    print(step(torch.amp.GradScaler("cpu")))
except TypeError as e:
    print("rejected", e)
''',
    },
    "AMP501-dict_rebind_attr": {
        "train.py": '''\
import torch
import torch.nn as nn
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.zeros(4).half()
    def forward(self, m):
        return self.bias.masked_fill(m, -1e9)
a = Attn()
a.__dict__["bias"] = torch.arange(4)
print(a(torch.tensor([True, False, True, False])))
''',
    },
    "AMP501-dict_update_state": {
        "train.py": '''\
import torch
import torch.nn as nn
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.zeros(4).half()
    def forward(self, m):
        return self.bias.masked_fill(m, -1e9)
    def restore(self, state):
        self.__dict__.update(state)
a = Attn()
a.restore({"bias": torch.arange(4)})
print(a(torch.tensor([True, False, True, False])))
''',
    },
    "AMP501-exec_rebind": {
        "train.py": '''\
import torch
bias = torch.zeros(4).half()
exec("bias = torch.arange(4)")
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
print(out)
''',
    },
    "AMP501-globals_subscript_rebind": {
        "train.py": '''\
import torch
bias = torch.zeros(4).half()
def reset():
    globals()["bias"] = torch.arange(4)
reset()
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
print(out)
''',
    },
    "AMP501-match_capture": {
        "train.py": '''\
import torch
ids = torch.arange(4)
bias = torch.zeros(4).half()
match ids:
    case torch.Tensor() as bias:
        pass
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
print(out)
''',
    },
    "AMP501-nonlocal_rebind": {
        "train.py": '''\
import torch
def attend(m):
    bias = torch.zeros(4).half()
    def reset():
        nonlocal bias
        bias = torch.arange(4)
    reset()
    return bias.masked_fill(m, -1e9)
print(attend(torch.tensor([True, False, True, False])))
''',
    },
    "AMP501-property_setter": {
        "train.py": '''\
import torch
class Q:
    def __init__(self):
        self.bias = torch.zeros(4).half()
    @property
    def bias(self):
        return (self._b * 100).long()
    @bias.setter
    def bias(self, v):
        self._b = v
    def apply(self, m):
        return self.bias.masked_fill(m, -1e9)
print(Q().apply(torch.tensor([True, False, True, False])))
''',
    },
    "AMP501-sys_modules_setattr_self": {
        "train.py": '''\
import sys
import torch
bias = torch.zeros(4).half()
sys.modules[__name__].bias = torch.arange(4)
m = torch.tensor([True, False, True, False])
out = bias.masked_fill(m, -1e9)
print(out)
''',
    },
    "AMP501-view_param_dtype": {
        "train.py": '''\
import torch
def bits_of(x, dt):
    bits = x.half().view(dt)
    return bits.masked_fill(bits < 0, -1e9)
print(bits_of(torch.randn(4), torch.int32))
''',
    },
}
