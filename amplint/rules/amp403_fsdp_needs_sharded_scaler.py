"""AMP403 fsdp-needs-sharded-scaler."""

from __future__ import annotations

from amplint.analysis.conditions import contradicts, facts, guarding_tests
from amplint.rules._base import Rule

# Wrappers whose sharded gradients are plain local tensors (FSDP1, fairscale).
# NB: FSDP2's `fully_shard` is not here: its gradients are DTensors, and DTensor's
# dispatcher all-reduces GradScaler's found-inf flag across the mesh
# (`found_inf_reduce_handler` in torch/distributed/tensor/_dispatch.py), so the plain
# `torch.amp.GradScaler` is correct with it (Accelerate relies on that).
FSDP_WRAPPERS = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "fairscale.nn.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)


class FsdpNeedsShardedScaler(Rule):
    """
    ## What it does
    Flags a plain `torch.amp.GradScaler(...)` (or `torch.cuda.amp.GradScaler`) that
    may be enabled, in a module that wraps a model with FSDP1
    (`FullyShardedDataParallel(...)`) or fairscale's FSDP, on a path that can run
    with the wrap. Facts are per object, not per module: a plain scaler built on a
    path exclusive of every wrap (`if args.fsdp: ... else: GradScaler()`) is not
    reported, nor is the plain fallback of a module whose `ShardedGradScaler` can go
    with the wrap (`ShardedGradScaler() if distributed else GradScaler()`); a module
    that builds its `ShardedGradScaler` only for the paths that do not wrap, and the
    plain one where it wraps, is reported. FSDP2's `fully_shard` is not reported:
    its DTensor gradients make the plain scaler all-reduce its inf check.

    ## Why is this bad?
    Under FSDP each rank holds a shard of every gradient. The plain scaler looks for
    inf/NaN only in the local shard, so ranks disagree on whether to skip the step:
    some update, some do not, and the replicas silently diverge. It also handles
    CPU-offloaded and sharded gradients incorrectly. `ShardedGradScaler` all-reduces
    the found-inf flag across the process group.

    ## Example
    ```python
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = FSDP(model)
    scaler = torch.amp.GradScaler("cuda")
    ```

    Use instead:
    ```python
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = FSDP(model)
    scaler = ShardedGradScaler("cuda")
    ```

    ## Runtime confirmation
    `amplint verify` sees an FSDP module and a non-sharded scaler at the first step.
    """

    code = "AMP403"
    name = "fsdp-needs-sharded-scaler"
    message = "plain `{scaler}` with an FSDP-wrapped model; use `ShardedGradScaler`"
    requires_any = ("FullyShardedDataParallel",)
    and_requires_any = (("GradScaler",),)

    def check(self) -> None:
        model = self.model
        wraps = [site.node for site in model.calls if model.qualify(site.node.func) in FSDP_WRAPPERS]
        if not wraps:
            return
        constructions = model.bindings.scaler_constructions
        wrap_facts = [_path_facts(model, w) for w in wraps]
        sharded = [_path_facts(model, c.call) for c in constructions if c.sharded]
        # The FSDP wraps a sharded scaler can go with (a path that builds both): the plain
        # scaler of such a module is the fallback of the other paths.
        covered = [w for w in wrap_facts if any(not _exclusive(s, w) for s in sharded)]
        for c in constructions:
            if c.sharded or c.enabled is False:
                continue
            own = _path_facts(model, c.call)
            if any(not _exclusive(own, w) for w in wrap_facts if w not in covered) or (
                not sharded and any(not _exclusive(own, w) for w in wrap_facts)
            ):
                self.report(c.call, scaler=c.qualname.rsplit(".", 1)[-1])


def _path_facts(model, node) -> tuple:
    """What the `if`s and conditional expressions around `node` say where it runs."""
    code = model.module.code_for_node
    tests = guarding_tests(model.module, node) or ()
    return tuple(f for test, truth in tests for f in facts(test, code, truth))


def _exclusive(a: tuple, b: tuple) -> bool:
    """No run takes both paths: a fact of one contradicts a fact of the other
    (`if args.fsdp:` and `else:`, `strategy == "fsdp"` and `strategy == "ddp"`)."""
    return any(contradicts(x, y) for x in a for y in b)
