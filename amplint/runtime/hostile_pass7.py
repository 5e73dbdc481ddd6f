"""Reproducers of the seventh hostile pass: where a positive-evidence fix still changed a program.

The pass attacked the conditions the sixth pass's fixes introduced: AMP101's quiet window
(a comparison, a name, a truth test, a property or the clip itself raising into a caller's
handler; an earlier `unscale_` under another name; a project clip that unscales; a property
that gives another optimizer), AMP102/AMP103's plain scaler (an update four helpers deep, a
patched or replaced GradScaler class, `exec`, `globals()`, `sys.modules`, an optimizer hook,
a conditionally imported stand-in), AMP108's uncaught error (`finally: continue`, a lambda or
generator caller, a class decorator, `ExitStack`, `runpy`/`importlib`/`exec` launchers),
AMP501's floating-tensor evidence (`.view(torch.int32)`, `.data =`, `**kwargs`, attributes
set from outside, one-argument `torch.where`, an integer embedding table), and AMP401's safe
fix inside a self-printing f-string field (`{expr=}`).  Each must now get no fix, or a fix
that changes nothing (`fix_execution.variants`).
"""

CASES: dict[str, dict[str, str]] = {
    "AMP101-clip_argument-parameters_of_non_module": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

class Wrapper:
    def __init__(self, m):
        self.m = m
        self.n = 0
    def parameters(self):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("wrapper detached")
        return self.m.parameters()
wrapper = Wrapper(model)

def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(wrapper.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-clip_argument-property": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

class Cfg:
    def __init__(self):
        self.n = 0
    @property
    def max_norm(self):
        self.n += 1
        if self.n == 2:
            raise KeyError("max_norm")
        return 1e6
cfg = Cfg()

def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_norm)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-clip_raises-max_norm_value": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_step(i):
    max_norm = None if i == 1 else 1e6
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-clip_raises-star_imported_project_clip": {
        "myclip.py": '''\
import torch
state = {}
def clip_grad_norm_(params, max_norm):
    state['n'] = state.get('n', 0) + 1
    if state['n'] == 2:
        raise ValueError('bad clip')
    return torch.nn.utils.clip_grad_norm_(params, max_norm)
''',
        "train.py": '''\
import torch
from myclip import *

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-clip_statement-property_setter": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

class Tracker:
    def __init__(self):
        self.n = 0
    @property
    def norm(self):
        return 0
    @norm.setter
    def norm(self, v):
        self.n += 1
        if self.n == 2:
            raise ValueError("tracker full")
tracker = Tracker()

def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    tracker.norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-other_optimizer-rotating_property": {
        "train.py": '''\
import torch

torch.manual_seed(0)
x = torch.randn(8, 4)


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1)
        half = [self.model.weight], [self.model.bias]
        self.opts = [torch.optim.SGD(half[0], lr=0.01), torch.optim.SGD(half[1], lr=0.01)]
        self.calls = 0
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    @property
    def opt(self):
        """round-robin: each step trains the next parameter group"""
        self.calls += 1
        return self.opts[self.calls % 2]

    def train_step(self):
        for o in self.opts:
            o.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = self.model(x).float().pow(2).mean()
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1e6)
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.item()


t = Trainer()
for i in range(4):
    print(i, t.train_step())
print(t.model.weight.data, t.model.bias.data, t.scaler._scale)
''',
    },
    "AMP101-second_unscale-bound_method_alias": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
unscale = scaler.unscale_


def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    unscale(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-second_unscale-getattr": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    getattr(scaler, 'unscale_')(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-second_unscale-project_clip_method": {
        "tools.py": '''\
import torch
class _Clipper:
    def __init__(self, m, s, o):
        self.m, self.s, self.o = m, s, o
    def clip_grad_norm_(self, max_norm):
        self.s.unscale_(self.o)
        return torch.nn.utils.clip_grad_norm_(self.m.parameters(), max_norm)
def make_clipper(m, s, o):
    return _Clipper(m, s, o)
''',
        "train.py": '''\
import torch
import tools

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
clipper = tools.make_clipper(model, scaler, opt)


def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    clipper.clip_grad_norm_(1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-step_raises-optimizer_pre_hook": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

calls = [0]
def hook(o, args, kwargs):
    calls[0] += 1
    if calls[0] == 2:
        raise ValueError("lr schedule exhausted")
opt.register_step_pre_hook(hook)

def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-window-comparison_raises": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

limit = None

def train_step(i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    ok = i < limit
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-window-tensor_truthiness": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_step(i):
    bad = torch.tensor([i, 1])
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    if bad:
        pass
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-window-unbound_local": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_step(i):
    if i % 2:
        flag = True
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    seen = flag
    scaler.step(opt)
    scaler.update()
    return loss.item()


for i in range(4):
    try:
        print(i, train_step(i))
    except Exception as e:
        print("skip", type(e).__name__, e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-class_method_patched": {
        "amp_patch.py": '''\
import torch
_orig = torch.amp.GradScaler.step
def _step_and_update(self, optimizer, *args, **kwargs):
    r = _orig(self, optimizer, *args, **kwargs)
    self.update()
    return r
torch.amp.GradScaler.step = _step_and_update
''',
        "train.py": '''\
import torch
import amp_patch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    pass
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-class_replaced": {
        "amp_patch.py": '''\
import torch
class AutoScaler(torch.amp.GradScaler):
    def step(self, optimizer, *args, **kwargs):
        r = super().step(optimizer, *args, **kwargs)
        self.update()
        return r
torch.amp.GradScaler = AutoScaler
''',
        "train.py": '''\
import torch
import amp_patch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    pass
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-exec_string": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    exec("scaler.update()")
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-globals_subscript": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    globals()["scaler"].update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-helper_four_calls_deep": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def d(obj):
    obj.update()
def c():
    d(scaler)
def b():
    c()
def a():
    b()

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    a()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-optimizer_post_hook": {
        "hooks.py": '''\
import gc, torch
def install(opt):
    def _after(o, args, kwargs):
        for obj in gc.get_objects():
            if isinstance(obj, torch.amp.GradScaler):
                obj.update()
    opt.register_step_post_hook(_after)
''',
        "train.py": '''\
import torch
import hooks
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
hooks.install(opt)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    pass
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-hidden_update-sys_modules_other_module": {
        "hooks.py": '''\
import sys
def after_step():
    sys.modules["__main__"].__dict__["sc" + "aler"].update()
''',
        "train.py": '''\
import torch
import hooks
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    hooks.after_step()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP102-stand_in-conditional_import_shim": {
        "shim.py": '''\
class GradScaler:
    """A stand-in for CPU runs: no loss scaling; step() is a plain optimizer step."""
    def __init__(self, *a, **k):
        self._scale = 1.0

    def scale(self, loss):
        return loss

    def step(self, opt):
        opt.step()
''',
        "train.py": '''\
import torch
USE_AMP = False
if USE_AMP:
    from torch.amp import GradScaler
else:
    from shim import GradScaler
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    pass
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-scaled_in_imported_module": {
        "lossfn.py": '''\
import sys
def finish(loss):
    s = sys.modules["__main__"].__dict__["sc" + "aler"]
    return s.scale(loss)
''',
        "train.py": '''\
import torch
import lossfn
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    loss = lossfn.finish(loss)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-stand_in-conditional_import_shim": {
        "shim.py": '''\
class GradScaler:
    """A stand-in for CPU runs: no loss scaling."""
    def __init__(self, *a, **k):
        self._scale = 1.0
    def step(self, opt):
        opt.step()
    def update(self):
        pass
''',
        "train.py": '''\
import torch
USE_AMP = False
if USE_AMP:
    from torch.amp import GradScaler
else:
    from shim import GradScaler
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-class_decorator": {
        "train.py": '''\
import torch
import functools
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def tolerant(cls):
    for name, fn in list(vars(cls).items()):
        if callable(fn) and not name.startswith("__"):
            def wrap(fn=fn):
                @functools.wraps(fn)
                def inner(*a, **k):
                    try:
                        return fn(*a, **k)
                    except RuntimeError as e:
                        print("tolerated:", e)
                return inner
            setattr(cls, name, wrap())
    return cls


@tolerant
class Trainer:
    def train_step(self):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
        scaler.step(opt)
        scaler.update()
        return loss.item()

    def run(self):
        for i in range(3):
            print(i, self.train_step())


Trainer().run()
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-exec_launcher": {
        "job.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

for i in range(3):
    print(i, train_step())
print(model.weight.data, scaler._scale)
''',
        "train.py": '''\
ns = {"__name__": "__main__"}
try:
    exec(compile(open("job.py").read(), "job.py", "exec"), ns)
except RuntimeError as e:
    print("job failed:", e)
''',
    },
    "AMP108-caught_elsewhere-exitstack_push": {
        "train.py": '''\
import torch
import contextlib
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

for i in range(3):
    with contextlib.ExitStack() as stack:
        stack.push(lambda *exc: exc[0] is RuntimeError)
        print(i, train_step())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-finally_continue": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

for i in range(3):
    try:
        print(i, train_step())
    finally:
        continue
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-finally_return": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

def run():
    try:
        for i in range(3):
            print(i, train_step())
    finally:
        return "done"


print(run())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-genexp_consumed_in_try": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

results = (train_step() for _ in range(3))
try:
    for r in results:
        print(r)
except RuntimeError as e:
    print("failed:", e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-globals_rewrap": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

def tolerant(fn):
    def inner(*a, **k):
        try:
            return fn(*a, **k)
        except RuntimeError as e:
            print("tolerated:", e)
    return inner


g = globals()
for name in ["train_" + "step"]:
    g[name] = tolerant(g[name])

for i in range(3):
    print(i, train_step())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-importlib_launcher": {
        "job.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

for i in range(3):
    print(i, train_step())
print(model.weight.data, scaler._scale)
''',
        "train.py": '''\
import importlib
try:
    job = importlib.import_module("job")
    print("job finished", job.model.weight.data)
except RuntimeError as e:
    print("job failed:", e)
''',
    },
    "AMP108-caught_elsewhere-lambda_caller": {
        "train.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

step_fn = lambda: train_step()
for i in range(3):
    try:
        print(i, step_fn())
    except RuntimeError as e:
        print("step failed:", e)
        opt.zero_grad()
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-runpy_launcher": {
        "job.py": '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    scaler.step(opt)
    scaler.update()
    return loss.item()

for i in range(3):
    print(i, train_step())
print(model.weight.data, scaler._scale)
''',
        "train.py": '''\
import runpy
try:
    ns = runpy.run_path("job.py")
    print("job finished", ns["model"].weight.data)
except RuntimeError as e:
    print("job failed:", e)
''',
    },
    "AMP401-fstring-debug_specifier": {
        "train.py": '''\
import torch

scaler = None
print(f"{torch.cpu.amp.GradScaler(init_scale=2.0).get_scale()=}")
''',
    },
    "AMP501-not_a_float-attribute_set_outside_class": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.zeros(2, 3).half()

    def forward(self, m):
        return self.bias.masked_fill(m, -1e9)


head = Head()
head.bias = torch.arange(6).view(2, 3)
out = head(pad)
print(out.dtype, out)
''',
    },
    "AMP501-not_a_float-data_assigned": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

ranks = torch.randn(2, 3).half()
ranks.data = ranks.data.argsort(dim=-1)
out = ranks.masked_fill(pad, -1e9)
print(out.dtype, out)
''',
    },
    "AMP501-not_a_float-embedding_int_table": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

table = torch.arange(12).view(6, 2)
codes = F.embedding(torch.tensor([[0, 1, 2], [3, 4, 5]]), table)[..., 0]
codes = codes.masked_fill(pad, -1e9)
print(codes.dtype, codes)
''',
    },
    "AMP501-not_a_float-like_factory_kwargs": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

opts = {"dtype": torch.long}
ids = torch.zeros_like(torch.randn(2, 3), **opts)
ids = ids.masked_fill(pad, -1e9)
print(ids.dtype, ids)
''',
    },
    "AMP501-not_a_float-module_swapped": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, h, m):
        y = self.proj(h)
        return y.masked_fill(m, -1e9)


head = Head()
head.proj = torch.nn.Identity()
out = head(torch.arange(6).view(2, 3), pad)
print(out.dtype, out)
''',
    },
    "AMP501-not_a_float-setattr_in_class": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])


class Head(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.bias = torch.zeros(2, 3).half()
        if kind == "ids":
            setattr(self, "bias", torch.arange(6).view(2, 3))

    def forward(self, m):
        return self.bias.masked_fill(m, -1e9)


out = Head("ids")(pad)
print(out.dtype, out)
''',
    },
    "AMP501-not_a_float-subclass_attribute": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.zeros(2, 3).half()

    def forward(self, m):
        return self.bias.masked_fill(m, -1e9)


class IntHead(Head):
    def __init__(self):
        super().__init__()
        self.bias = torch.arange(6).view(2, 3)


out = IntHead()(pad)
print(out.dtype, out)
''',
    },
    "AMP501-not_a_float-view_as_int32": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

bits = torch.randn(2, 6).half().view(torch.int32)
bits = bits.masked_fill(pad, -1e9)
print(bits.dtype, bits)
''',
    },
    "AMP501-not_a_float-where_one_argument": {
        "train.py": '''\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

w_ = torch.randn(2, 3)
rows = torch.where(w_)[0]
rows = rows.masked_fill(rows > 2, -1e9)
print(rows.dtype, rows)
''',
    },
}
