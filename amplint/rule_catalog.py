"""Every rule's code, name and default, without importing the rule: what selecting rules needs.

A warm run answers from the result cache and parses nothing, so it must not pay for the
rule modules and libcst (0.11 s of a 0.2 s check of one file, `python -X importtime`).
Configuration, `--select` and the cache key read this table; `registry` imports a rule's
class only when a file is analysed.  tests/test_registry.py checks that the table and the
classes agree; CONTRIBUTING.md ("Adding a rule") has a new rule add its line here.
"""

from __future__ import annotations

from typing import NamedTuple


class RuleEntry(NamedTuple):
    code: str
    name: str
    default_enabled: bool
    module: str  # under amplint.rules
    class_name: str
    # "stable", or "preview": a rule that has not yet shown a precision of 0.90 on real code
    # that shaped no rule (the test split of benchmarks/real_code_eval.py, figures in
    # rule_figures.py).  A preview rule runs only with `--preview` / `preview = true`, however
    # it is selected (as in Ruff); tests/test_registry.py holds the stable rules to the bar.
    tier: str = "stable"


CATALOG: tuple[RuleEntry, ...] = (
    RuleEntry("AMP001", "unused-noqa", False, "amp001_unused_noqa", "UnusedNoqa"),
    RuleEntry("AMP101", "clip-before-unscale", True, "amp101_clip_before_unscale", "ClipBeforeUnscale", "preview"),
    RuleEntry("AMP102", "step-without-update", True, "amp102_step_without_update", "StepWithoutUpdate"),
    RuleEntry("AMP103", "backward-not-scaled", True, "amp103_backward_not_scaled", "BackwardNotScaled", "preview"),
    RuleEntry("AMP104", "step-bypasses-scaler", True, "amp104_step_bypasses_scaler", "StepBypassesScaler"),
    RuleEntry("AMP105", "scaler-in-loop", True, "amp105_scaler_in_loop", "ScalerInLoop"),
    RuleEntry("AMP106", "scaler-not-checkpointed", True, "amp106_scaler_not_checkpointed", "ScalerNotCheckpointed", "preview"),
    RuleEntry("AMP107", "update-per-microbatch", True, "amp107_update_per_microbatch", "UpdatePerMicrobatch"),
    RuleEntry("AMP108", "unscale-twice", True, "amp108_unscale_twice", "UnscaleTwice"),
    RuleEntry("AMP109", "unscale-step-mismatch", True, "amp109_unscale_step_mismatch", "UnscaleStepMismatch"),
    RuleEntry("AMP110", "scaler-state-not-in-state-dict", True, "amp110_scaler_state_not_in_state_dict", "ScalerStateNotInStateDict", "preview"),
    RuleEntry("AMP111", "scale-divided-after-unscale", True, "amp111_scale_divided_after_unscale", "ScaleDividedAfterUnscale", "preview"),
    RuleEntry("AMP112", "norm-of-scaled-gradients", True, "amp112_norm_of_scaled_gradients", "NormOfScaledGradients", "preview"),
    RuleEntry("AMP113", "update-between-steps", True, "amp113_update_between_steps", "UpdateBetweenSteps", "preview"),
    RuleEntry("AMP114", "scaled-autograd-grad", True, "amp114_scaled_autograd_grad", "ScaledAutogradGrad", "preview"),
    RuleEntry("AMP115", "double-loss-scaling", True, "amp115_double_loss_scaling", "DoubleLossScaling", "preview"),
    RuleEntry("AMP201", "backward-inside-autocast", True, "amp201_backward_inside_autocast", "BackwardInsideAutocast", "preview"),
    RuleEntry("AMP202", "step-inside-autocast", True, "amp202_step_inside_autocast", "StepInsideAutocast", "preview"),
    RuleEntry("AMP203", "fp16-autocast-without-scaler", True, "amp203_fp16_autocast_without_scaler", "Fp16AutocastWithoutScaler"),
    RuleEntry("AMP204", "scaler-with-bf16", True, "amp204_scaler_with_bf16", "ScalerWithBf16", "preview"),
    RuleEntry("AMP205", "custom-function-without-custom-fwd", True, "amp205_custom_function_without_custom_fwd", "CustomFunctionWithoutCustomFwd", "preview"),
    RuleEntry("AMP206", "scaler-without-autocast", True, "amp206_scaler_without_autocast", "ScalerWithoutAutocast", "preview"),
    RuleEntry("AMP207", "fp16-and-bf16-enabled", True, "amp207_fp16_and_bf16_enabled", "Fp16AndBf16Enabled", "preview"),
    RuleEntry("AMP208", "amp-never-enabled", True, "amp208_amp_never_enabled", "AmpNeverEnabled", "preview"),
    RuleEntry("AMP209", "fp16-on-bf16-checkpoint", True, "amp209_fp16_on_bf16_checkpoint", "Fp16OnBf16Checkpoint", "preview"),
    RuleEntry("AMP301", "manual-half-model", True, "amp301_manual_half_model", "ManualHalfModel"),
    RuleEntry("AMP302", "redundant-input-cast", False, "amp302_redundant_input_cast", "RedundantInputCast", "preview"),
    RuleEntry("AMP303", "default-dtype-half", True, "amp303_default_dtype_half", "DefaultDtypeHalf"),
    RuleEntry("AMP304", "fp16-eps-underflow", True, "amp304_fp16_eps_underflow", "Fp16EpsUnderflow"),
    RuleEntry("AMP305", "trains-a-cast-copy", True, "amp305_trains_a_cast_copy", "TrainsACastCopy"),
    RuleEntry("AMP401", "deprecated-cuda-amp", True, "amp401_deprecated_cuda_amp", "DeprecatedCudaAmp"),
    RuleEntry("AMP402", "apex-amp", True, "amp402_apex_amp", "ApexAmp"),
    RuleEntry("AMP403", "fsdp-needs-sharded-scaler", True, "amp403_fsdp_needs_sharded_scaler", "FsdpNeedsShardedScaler"),
    RuleEntry("AMP501", "fp16-overflow-constant", True, "amp501_fp16_overflow_constant", "Fp16OverflowConstant"),
    RuleEntry("AMP502", "unguarded-log-sqrt-div", False, "amp502_unguarded_log_sqrt_div", "UnguardedLogSqrtDiv"),
)
