"""Every rule, listed explicitly: greppable, cheap to import, no discovery magic."""

from amplint.rules.amp101_clip_before_unscale import ClipBeforeUnscale
from amplint.rules.amp201_backward_inside_autocast import BackwardInsideAutocast
from amplint.rules.amp301_manual_half_model import ManualHalfModel
from amplint.rules.amp401_deprecated_cuda_amp import DeprecatedCudaAmp

ALL_RULES = (
    ClipBeforeUnscale,
    BackwardInsideAutocast,
    ManualHalfModel,
    DeprecatedCudaAmp,
)
