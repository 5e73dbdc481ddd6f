"""Reproducers of the sixth hostile pass: where an unsafe fix changed what a program does.

Each case is a small program (its entry is `train.py`) for which amplint once offered a fix
that, run, behaved differently from the code as written: an AMP101 `unscale_` inserted
where an exception, a `with` block's exit or an abandoned generator leaves the optimizer
unscaled; an AMP103 `scaler.scale(loss)` around a loss already scaled (a generator sum, a
lambda, a helper or callable object given the scaler, a chained assignment) or on a
factory's stand-in; an AMP108 deletion of an `unscale_` whose RuntimeError a callback's
caller, a thread or an importer handled; an AMP501 `torch.finfo` of an integer, bool or
NumPy value, or of the wrong tensor (`new_full(**kwargs)`); an AMP102 `update()` where a
`functools.partial` already updated.  They are the fix-safety harness's regression tests
(`fix_execution.variants`): each must now get no fix, or a fix that changes nothing.
"""

CASES: dict[str, dict[str, str]] = {
    "AMP101-caller_catches-property_raises": {
        "train.py": '''\
# AMP101: between the clip and scaler.step only a name is bound to an attribute
# (`healthy = monitor.healthy`) -- but the attribute is a property whose getter raises on
# one step, and the caller skips that step.  Fixed, the inserted scaler.unscale_(opt) has
# run when it raises: the optimizer stays "unscaled" and the next step's unscale_ raises.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


class Monitor:
    def __init__(self):
        self.n = 0

    @property
    def healthy(self):
        self.n += 1
        if self.n == 2:
            raise ConnectionError("metrics server unreachable")
        return True


monitor = Monitor()


def train_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    healthy = monitor.healthy
    scaler.step(opt)
    scaler.update()
    return loss.item(), healthy


for i in range(4):
    try:
        print(i, train_step())
    except ConnectionError as e:
        print("skip", e)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-caller_catches-step_fn_in_try": {
        "train.py": '''\
# AMP101: the step function is called by callers that skip a failed step
# (try/except ...: continue, and contextlib.suppress).  What raises sits between the
# inserted scaler.unscale_(opt) and scaler.step(opt): the clip threshold's lookup, an
# argument of the clip call itself.  As written, a skipped step leaves the scaler READY and
# the next step runs; fixed, the optimizer stays "unscaled" and the next unscale_ raises.
import contextlib

import torch

torch.manual_seed(0)
x = torch.randn(8, 4)


class BadStep(Exception):
    pass


def max_norm_for(i):
    # e.g. an adaptive threshold that refuses a step whose statistics look wrong
    if i == 1:
        raise BadStep(f"no clip threshold for step {i}")
    return 1e6  # high enough that scaled and unscaled gradients are clipped alike (not at all)


def train_step(model, opt, scaler, i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm_for(i))
    scaler.step(opt)
    scaler.update()
    return loss.item()


def setup():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, opt, scaler


# 1: the caller skips a bad step with try/except ...: continue
model, opt, scaler = setup()
for i in range(4):
    try:
        loss = train_step(model, opt, scaler, i)
    except Exception as e:
        print("skip", type(e).__name__, e)
        continue
    print(i, loss)
print(model.weight.data, scaler._scale)

# 2: the caller skips a bad step with contextlib.suppress
model, opt, scaler = setup()
for i in range(4):
    with contextlib.suppress(BadStep):
        print(i, train_step(model, opt, scaler, i))
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-caller_catches-with_exit_raises": {
        "train.py": '''\
# AMP101: the clip sits in a `with` block whose __exit__ (a watchdog/timer) raises on one
# step; the caller suppresses that error and goes on.  The fix inserts
# scaler.unscale_(opt) inside the block, before the clip: the __exit__ then runs between
# the unscale_ and scaler.step, and after the skipped step the next unscale_ raises.
import contextlib

import torch

torch.manual_seed(0)
x = torch.randn(8, 4)
calls = [0]


class TooSlow(Exception):
    pass


@contextlib.contextmanager
def watchdog(name):
    yield
    calls[0] += 1
    if calls[0] == 2:  # the second clip "took too long"
        raise TooSlow(f"{name} too slow")


def train_step(model, opt, scaler, i):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    with watchdog("clip"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    return loss.item()


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for i in range(4):
    with contextlib.suppress(TooSlow):
        print(i, train_step(model, opt, scaler, i))
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-generator-yield_between": {
        "train.py": '''\
# AMP101: a generator-style trainer yields between the clip and scaler.step (to report the
# clipped norm); the consumer stops early at a threshold and starts a new epoch's generator.
# Abandoned at the yield, the fixed generator leaves the optimizer "unscaled" (the inserted
# unscale_ ran, scaler.step/update did not); the next generator's unscale_ raises.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_steps(n):
    for i in range(n):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
        yield i, loss.item()
        scaler.step(opt)
        scaler.update()


for epoch in range(2):
    for i, loss in train_steps(4):
        print(epoch, i, loss)
        if i == 1:
            break  # early stop: the generator is abandoned at its yield
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-generator-yield_in_clip_argument": {
        "train.py": '''\
# AMP101: a coroutine-style trainer: each step yields its loss and receives the clip
# threshold from the driver (`(yield ...)` as the clip's max_norm).  The fix inserts
# scaler.unscale_(opt) before the clip statement, i.e. before the yield; a driver that
# stops early (close() at the yield) then leaves the optimizer "unscaled", and the next
# epoch's first unscale_ raises.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def train_steps(n):
    for i in range(n):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), (yield i, loss.item()))
        scaler.step(opt)
        scaler.update()


for epoch in range(2):
    steps = train_steps(4)
    i, loss = next(steps)
    while True:
        print(epoch, i, loss)
        if i == 1:
            steps.close()  # early stop: the generator is abandoned at its yield
            break
        i, loss = steps.send(1e6)  # the driver chooses the clip threshold (never clips here)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP101-rebound_by_call-other_object_rebinds_opt": {
        "train.py": '''\
# AMP101: between the clip and scaler.step(self.opt), a hook object (another object than the
# trainer) rebuilds `trainer.opt` on step 2 (e.g. after unfreezing).  The inserted
# scaler.unscale_(self.opt) unscales the OLD optimizer's gradients in place; step() then
# unscales the NEW optimizer, i.e. the same .grad tensors a second time: the update is
# divided by the scale twice.
import torch

torch.manual_seed(0)


class Hooks:
    """Callbacks that hold a reference to their trainer (as Lightning's do)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.n = 0

    def on_clip(self):
        self.n += 1
        if self.n == 2:
            t = self.trainer
            t.opt = torch.optim.SGD(t.model.parameters(), lr=0.1)


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        self.hooks = Hooks(self)

    def step(self, x):
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = self.model(x).float().pow(2).mean()
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1e6)
        self.hooks.on_clip()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.item()


t = Trainer()
x = torch.randn(8, 4)
for i in range(4):
    print(i, t.step(x))
print(t.model.weight.data, t.scaler._scale)
''',
    },
    "AMP101-rebound_by_call-rebind_in_clip_argument": {
        "train.py": '''\
# AMP101: the parameters to clip come from a callback object (holding a reference to the
# trainer) that, on step 2, unfreezes and rebuilds `trainer.opt`.  The call is an argument
# of the clip, so it runs after the inserted scaler.unscale_(self.opt) (the OLD optimizer)
# and before scaler.step(self.opt) (the NEW one): the same .grad tensors are unscaled twice.
import torch

torch.manual_seed(0)


class Unfreeze:
    def __init__(self, trainer):
        self.trainer = trainer
        self.n = 0

    def params_to_clip(self):
        self.n += 1
        t = self.trainer
        if self.n == 2:
            t.opt = torch.optim.SGD(t.model.parameters(), lr=0.1)
        return t.model.parameters()


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        self.callback = Unfreeze(self)

    def step(self, x):
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = self.model(x).float().pow(2).mean()
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.callback.params_to_clip(), 1e6)
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.item()


t = Trainer()
x = torch.randn(8, 4)
for i in range(4):
    print(i, t.step(x))
print(t.model.weight.data, t.scaler._scale)
''',
    },
    "AMP102-hidden_alias-partial_update": {
        "train.py": '''\
# AMP102: the scaler is updated every iteration through
# `functools.partial(torch.amp.GradScaler.update, scaler)`, built by the factory that
# builds the scaler and returned beside it.  The fix adds `scaler.update()` after
# scaler.step: two updates per step, and the second finds no inf checks recorded
# (AssertionError "No inf checks were recorded prior to update.").
# (A partial built in this module, `functools.partial(GradScaler.update, scaler)`,
# makes the scaler escape: no fix there.)
import functools

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)


def make_amp():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    return scaler, functools.partial(torch.amp.GradScaler.update, scaler)


scaler, finish = make_amp()
for i in range(4):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    finish()
    print(i, loss.item(), scaler.get_scale())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-callable_object": {
        "train.py": '''\
# AMP103: a callable object whose __call__ returns `self.scaler.scale(x)` scales the loss;
# rewriting `loss.backward()` into `scaler.scale(loss).backward()` scales it twice.
import torch

torch.manual_seed(0)


class LossScaler:
    def __init__(self, scaler):
        self.scaler = scaler

    def __call__(self, loss):
        return self.scaler.scale(loss)


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
scale_loss = LossScaler(scaler)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        raw = model(x).float().pow(2).mean()
    loss = scale_loss(raw)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-chained_assignment_alias": {
        "train.py": '''\
# AMP103: `scaler = amp_scaler = GradScaler(...)` (one object, two names, no alias expression); the
# loss is sum(amp_scaler.scale(l) ...), already scaled.  The rewrite scales it again via `scaler`.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = amp_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x).float()
        losses = [out[:, 0].pow(2).mean(), out[:, 1].abs().mean()]
    loss = sum(amp_scaler.scale(l) for l in losses)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-helper_param_renamed": {
        "train.py": '''\
# AMP103: a helper returns (grad_scaler.scale(raw), raw.item()); the loss unpacked from it is already
# scaled.  The helper's parameter is not named `scaler`, so a check that looks for other
# `<...scaler>.scale` uses by the receiver's last name misses it: the rewrite scales twice.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def compute(model, x, grad_scaler):
    with torch.autocast("cpu", dtype=torch.float16):
        raw = model(x).float().pow(2).mean()
    return grad_scaler.scale(raw), raw.item()


for i in range(3):
    opt.zero_grad()
    loss, value = compute(model, x, scaler)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, value)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-helper_returns_dict": {
        "train.py": '''\
# AMP103: a helper returns {"loss": scaler.scale(raw), ...}; the caller backpropagates
# out["loss"], already scaled.  The fix rewrites it into scaler.scale(loss).backward(): scaled twice.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def compute(model, x, scaler):
    with torch.autocast("cpu", dtype=torch.float16):
        raw = model(x).float().pow(2).mean()
    return {"loss": scaler.scale(raw), "raw": raw.item()}


for i in range(3):
    opt.zero_grad()
    out = compute(model, x, scaler)
    loss = out["loss"]
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, out["raw"])
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-helper_takes_scaler": {
        "train.py": '''\
# AMP103: `compute(model, x, scaler)` returns the scaled loss together with its plain value
# (`return scaler.scale(raw), raw.item()`), unpacked by the caller.  The loss is already
# scaled; rewriting `loss.backward()` into `scaler.scale(loss).backward()` scales it twice.
# (The single-value form `loss = compute(model, x, scaler)` is recognised: no fix there.)
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def compute(model, x, scaler):
    with torch.autocast("cpu", dtype=torch.float16):
        raw = model(x).float().pow(2).mean()
    return scaler.scale(raw), raw.item()


for i in range(3):
    opt.zero_grad()
    loss, value = compute(model, x, scaler)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, value)
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-lambda": {
        "train.py": '''\
# AMP103: `scale_fn = lambda l: scaler.scale(l)`; the loss backpropagated is scale_fn(raw),
# already scaled.  Rewriting `loss.backward()` into `scaler.scale(loss).backward()` scales twice.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
scale_fn = lambda l: scaler.scale(l)  # noqa: E731

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        raw = model(x).float().pow(2).mean()
    loss = scale_fn(raw)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-double_scaling-sum_generator": {
        "train.py": '''\
# AMP103: the loss is already a sum of scaled losses (`sum(scaler.scale(l) for l in losses)`);
# rewriting `loss.backward()` into `scaler.scale(loss).backward()` scales it twice.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)

for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x).float()
        losses = [out[:, 0].pow(2).mean(), out[:, 1].abs().mean()]
    loss = sum(scaler.scale(l) for l in losses)
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP103-stand_in-factory": {
        "train.py": '''\
# AMP103: `scaler = make_scaler(use_amp)`: the factory returns a real GradScaler, or (on the
# path that runs here, use_amp=False) a stand-in without `scale`.  Rewriting
# `loss.backward()` into `scaler.scale(loss).backward()` raises AttributeError there.
import torch

torch.manual_seed(0)


class NoScaler:
    """fp32 stand-in: steps plainly."""

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass


def make_scaler(use_amp):
    if use_amp:
        return torch.amp.GradScaler("cpu", init_scale=1024.0)
    return NoScaler()


use_amp = False
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = make_scaler(use_amp)
x = torch.randn(8, 4)
for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16, enabled=use_amp):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
print(model.weight.data)
''',
    },
    "AMP108-caught_elsewhere-callback_in_other_module": {
        "other.py": '''\
"""A small training-loop library: runs a user hook before the optimizer step, tolerating
hooks that fail with a RuntimeError."""


def run_step(scaler, opt, before_step):
    try:
        before_step()
    except RuntimeError as e:
        print("before_step hook failed:", e)
    scaler.step(opt)
    scaler.update()
''',
        "train.py": '''\
# AMP108: the function with a second scaler.unscale_(opt) is a callback that other.py calls
# inside try/except RuntimeError.  As written the second unscale_ raises, the handler
# catches it, and the value clip after it never runs; the fix deletes the second unscale_,
# so the clip runs and the weights change.
import torch

from other import run_step

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def unscale_and_clip():
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)


for i in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean() * 100
    scaler.scale(loss).backward()
    run_step(scaler, opt, unscale_and_clip)
    print(i, loss.item())
print(model.weight.data, scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-import_in_try": {
        "job.py": '''\
# AMP108: job.py's module-level loop unscales twice; the launcher (this entry) imports it inside
# try/except RuntimeError.  As written the second unscale_ raises on the first step and the
# launcher reports the failed job; the fix deletes it, so the job trains to the end.
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
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    print(i, loss.item())
''',
        "train.py": '''\
# launcher: runs the job module, reporting a failed job instead of crashing
try:
    import job
except RuntimeError as e:
    print("job failed:", e)
else:
    print("job finished", job.model.weight.data, job.scaler._scale)
''',
    },
    "AMP108-caught_elsewhere-thread_target": {
        "train.py": '''\
# AMP108: the function with the second scaler.unscale_(opt) runs as a threading.Thread
# target.  As written the second unscale_ raises, the thread dies there (its traceback goes
# to stderr), scaler.step/update never run, and the main thread goes on and prints the
# untouched weights; the fix deletes the second unscale_, so the thread steps and updates.
import threading

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)


def worker_step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    print("stepped", loss.item())


for i in range(3):
    t = threading.Thread(target=worker_step)
    t.start()
    t.join()
    print(i, model.weight.data, scaler._scale)
''',
    },
    "AMP501-explicit_dtype-new_full_kwargs": {
        "train.py": '''\
# AMP501: `h.new_full(shape, -1e9, **kwargs)` where kwargs holds dtype=torch.float32: the
# new tensor is float32 and -1e9 fits.  The fix writes torch.finfo(h.dtype).min (float16's
# -65504), so the bias holds another value.
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16

h = torch.randn(2, 3, dtype=torch.float16)
kwargs = {"dtype": torch.float32}
bias = h.new_full((2, 3), -1e9, **kwargs)
print(bias.dtype, bias)
print(bias.sum().item())
''',
    },
    "AMP501-not_a_float-argsort": {
        "train.py": '''\
# AMP501: the tensor written is an argsort() result (int64 indices); -1e9 fits int64.
# The fix writes torch.finfo(order.dtype).min, which raises TypeError for int64.
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

scores = torch.randn(2, 3)
order = scores.argsort(dim=-1)
order = order.masked_fill(pad, -1e9)  # sentinel for padded positions
print(order.dtype, order)
''',
    },
    "AMP501-not_a_float-bool_mask": {
        "train.py": '''\
# AMP501: the tensor written is a bool mask; any nonzero value (-1e9 too) stores True.
# The fix writes torch.finfo(keep.dtype).min, which raises TypeError for torch.bool.
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

keep = torch.zeros(2, 3, dtype=torch.bool)
keep = keep.masked_fill(pad, -1e9)  # any nonzero value sets the flag
print(keep.dtype, keep)
''',
    },
    "AMP501-not_a_float-long_in_helper": {
        "train.py": '''\
# AMP501: the tensor written is int64, made so by `.long()` inside a helper.  -1e9 fits
# int64 (as written it stores -1000000000); the fix writes torch.finfo(ids.dtype).min,
# and torch.finfo of an integer dtype raises TypeError.
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])


def quantize(scores):
    return (scores * 100).long()


ids = quantize(torch.randn(2, 3))
ids = ids.masked_fill(pad, -1e9)  # sentinel for padded positions
print(ids.dtype, ids)
''',
    },
    "AMP501-not_a_float-to_int64": {
        "train.py": '''\
# AMP501: the tensor written is int64 (`.to(torch.int64)`); -1e9 fits int64.  The fix
# writes torch.finfo(ids.dtype).min, which raises TypeError for an integer dtype.
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16
pad = torch.tensor([[False, False, True], [False, True, True]])

ids = (torch.rand(2, 3) * 100).to(torch.int64)
ids = ids.masked_fill(pad, -1e9)  # sentinel for padded positions
print(ids.dtype, ids)
''',
    },
    "AMP501-not_a_tensor-numpy_from_helper": {
        "train.py": '''\
# AMP501: the array written (`bias[m] = -1e9`) is a NumPy array returned by a helper.
# The fix writes torch.finfo(bias.dtype).min; bias.dtype is a NumPy dtype, and
# torch.finfo raises TypeError on it.
import numpy as np
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16


def make_bias(shape):
    return np.zeros(shape, dtype=np.float32)


m = np.array([[True, False, True], [False, False, True]])
bias = make_bias((2, 3))
bias[m] = -1e9
print(bias.dtype, bias)
print(torch.softmax(torch.randn(2, 3) + torch.from_numpy(bias), -1))
''',
    },
    "AMP501-not_a_tensor-numpy_mean": {
        "train.py": '''\
# AMP501: `bias` is a NumPy array, the `.mean(axis=0)` of one; `.mean` on any receiver is taken as
# evidence of a floating torch tensor, so `bias[m] = -1e9` is fixed to torch.finfo(bias.dtype).min,
# which raises TypeError on a NumPy dtype.
import numpy as np
import torch

torch.manual_seed(0)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16

rng = np.random.default_rng(0)
m = np.array([[True, False, True], [False, False, True]])
bias = rng.random((4, 2, 3)).mean(axis=0)  # a NumPy array (float64)
bias[m] = -1e9
print(bias.dtype, bias)
''',
    },
}
