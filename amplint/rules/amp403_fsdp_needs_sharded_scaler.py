"""AMP403 fsdp-needs-sharded-scaler."""

from __future__ import annotations

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
    (`FullyShardedDataParallel(...)`) or fairscale's FSDP. A module that also builds
    a `ShardedGradScaler` (the plain one being the single-process fallback) is not
    reported, nor is FSDP2's `fully_shard`, whose DTensor gradients make the plain
    scaler all-reduce its inf check.

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
        if not any(model.qualify(site.node.func) in FSDP_WRAPPERS for site in model.calls):
            return
        constructions = model.bindings.scaler_constructions
        if any(c.sharded for c in constructions):
            return
        for c in constructions:
            if c.enabled is not False:
                self.report(c.call, scaler=c.qualname.rsplit(".", 1)[-1])
