"""Every rule, listed explicitly: greppable, cheap to import, no discovery magic.

A new rule is imported here and added to ALL_RULES (CONTRIBUTING.md, "Adding a rule").
"""

from amplint.rules.amp001_unused_noqa import UnusedNoqa
from amplint.rules.amp101_clip_before_unscale import ClipBeforeUnscale
from amplint.rules.amp102_step_without_update import StepWithoutUpdate
from amplint.rules.amp103_backward_not_scaled import BackwardNotScaled
from amplint.rules.amp104_step_bypasses_scaler import StepBypassesScaler
from amplint.rules.amp105_scaler_in_loop import ScalerInLoop
from amplint.rules.amp106_scaler_not_checkpointed import ScalerNotCheckpointed
from amplint.rules.amp107_update_per_microbatch import UpdatePerMicrobatch
from amplint.rules.amp108_unscale_twice import UnscaleTwice
from amplint.rules.amp109_unscale_step_mismatch import UnscaleStepMismatch
from amplint.rules.amp110_scaler_state_not_in_state_dict import ScalerStateNotInStateDict
from amplint.rules.amp111_scale_divided_after_unscale import ScaleDividedAfterUnscale
from amplint.rules.amp112_norm_of_scaled_gradients import NormOfScaledGradients
from amplint.rules.amp113_update_between_steps import UpdateBetweenSteps
from amplint.rules.amp114_scaled_autograd_grad import ScaledAutogradGrad
from amplint.rules.amp115_double_loss_scaling import DoubleLossScaling
from amplint.rules.amp201_backward_inside_autocast import BackwardInsideAutocast
from amplint.rules.amp202_step_inside_autocast import StepInsideAutocast
from amplint.rules.amp203_fp16_autocast_without_scaler import Fp16AutocastWithoutScaler
from amplint.rules.amp204_scaler_with_bf16 import ScalerWithBf16
from amplint.rules.amp205_custom_function_without_custom_fwd import CustomFunctionWithoutCustomFwd
from amplint.rules.amp206_scaler_without_autocast import ScalerWithoutAutocast
from amplint.rules.amp207_fp16_and_bf16_enabled import Fp16AndBf16Enabled
from amplint.rules.amp208_amp_never_enabled import AmpNeverEnabled
from amplint.rules.amp209_fp16_on_bf16_checkpoint import Fp16OnBf16Checkpoint
from amplint.rules.amp301_manual_half_model import ManualHalfModel
from amplint.rules.amp302_redundant_input_cast import RedundantInputCast
from amplint.rules.amp303_default_dtype_half import DefaultDtypeHalf
from amplint.rules.amp304_fp16_eps_underflow import Fp16EpsUnderflow
from amplint.rules.amp305_trains_a_cast_copy import TrainsACastCopy
from amplint.rules.amp401_deprecated_cuda_amp import DeprecatedCudaAmp
from amplint.rules.amp402_apex_amp import ApexAmp
from amplint.rules.amp403_fsdp_needs_sharded_scaler import FsdpNeedsShardedScaler
from amplint.rules.amp501_fp16_overflow_constant import Fp16OverflowConstant
from amplint.rules.amp502_unguarded_log_sqrt_div import UnguardedLogSqrtDiv

ALL_RULES = (
    UnusedNoqa,
    ClipBeforeUnscale,
    StepWithoutUpdate,
    BackwardNotScaled,
    StepBypassesScaler,
    ScalerInLoop,
    ScalerNotCheckpointed,
    UpdatePerMicrobatch,
    UnscaleTwice,
    UnscaleStepMismatch,
    ScalerStateNotInStateDict,
    ScaleDividedAfterUnscale,
    NormOfScaledGradients,
    UpdateBetweenSteps,
    ScaledAutogradGrad,
    DoubleLossScaling,
    BackwardInsideAutocast,
    StepInsideAutocast,
    Fp16AutocastWithoutScaler,
    ScalerWithBf16,
    CustomFunctionWithoutCustomFwd,
    ScalerWithoutAutocast,
    Fp16AndBf16Enabled,
    AmpNeverEnabled,
    Fp16OnBf16Checkpoint,
    ManualHalfModel,
    RedundantInputCast,
    DefaultDtypeHalf,
    Fp16EpsUnderflow,
    TrainsACastCopy,
    DeprecatedCudaAmp,
    ApexAmp,
    FsdpNeedsShardedScaler,
    Fp16OverflowConstant,
    UnguardedLogSqrtDiv,
)
