"""Building blocks of the model: norms, a fused GELU with a hand-written backward,
rotary position embeddings, stochastic depth."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in float32 whatever the input dtype."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


class FusedGeluFunction(torch.autograd.Function):
    """tanh-approximated GELU that saves only its input and recomputes in backward.

    Saves the memory of the intermediate tanh for long sequences; the backward is the
    analytic derivative of the tanh approximation.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x.pow(3))
        return 0.5 * x * (1.0 + torch.tanh(inner))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x.pow(3))
        tanh = torch.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x.pow(2))
        grad = 0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh.pow(2)) * d_inner
        return grad_out * grad


def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return FusedGeluFunction.apply(x)


class SwiGLU(nn.Module):
    """Gated MLP: silu(x W1) * (x W3), projected back by W2."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class GeluMLP(nn.Module):
    """The classic two-layer MLP, with the memory-saving GELU."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc_in = nn.Linear(dim, hidden)
        self.fc_out = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc_out(fused_gelu(self.fc_in(x))))


class RotaryEmbedding(nn.Module):
    """Rotary position embeddings (RoPE): cos/sin tables built once per length and device."""

    def __init__(self, head_dim: int, base: float = 10000.0, max_len: int = 2048) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_len = max_len
        self._cached_len = 0
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    def _tables(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or length > self._cached_len or self._cos.device != device:
            t = torch.arange(max(length, self._cached_len), device=device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq.to(device))
            emb = torch.cat((freqs, freqs), dim=-1)
            self._cos, self._sin = emb.cos(), emb.sin()
            self._cached_len = emb.shape[0]
        return self._cos[:length], self._sin[:length]

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._tables(q.shape[-2], q.device)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


class DropPath(nn.Module):
    """Stochastic depth: drop a whole residual branch per sample while training."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """True above the diagonal: the positions a token may not attend to."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool, device=device), diagonal=1)


def init_linear(module: nn.Module, std: float = 0.02) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
