"""TinyGPT: a decoder-only transformer built from layers.py."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import ModelConfig
from layers import DropPath, GeluMLP, RMSNorm, RotaryEmbedding, SwiGLU, causal_mask, init_linear


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rotary_base, cfg.max_seq_len)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        blocked = causal_mask(t, x.device)
        if padding_mask is not None:
            blocked = blocked | ~padding_mask[:, None, None, :].bool()
        scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
        weights = self.attn_dropout(F.softmax(scores.float(), dim=-1).to(q.dtype))
        out = (weights @ v).transpose(1, 2).reshape(b, t, -1)
        return self.resid_dropout(self.proj(out))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, drop_path: float, gated: bool) -> None:
        super().__init__()
        hidden = int(cfg.d_model * cfg.mlp_ratio)
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = SwiGLU(cfg.d_model, hidden, cfg.dropout) if gated else GeluMLP(cfg.d_model, hidden, cfg.dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), padding_mask))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class TinyGPT(nn.Module):
    """Embeddings, `n_layers` blocks (GELU MLPs in the lower half, SwiGLU above), a head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        rates = torch.linspace(0, cfg.drop_path, cfg.n_layers).tolist()
        self.blocks = nn.ModuleList(
            Block(cfg, rates[i], gated=i >= cfg.n_layers // 2) for i in range(cfg.n_layers)
        )
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        self.apply(init_linear)
        # GPT-2's scaled init of the residual projections
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("w2.weight") or name.endswith("fc_out.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layers))

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        x = self.dropout(self.embed(input_ids))
        for block in self.blocks:
            x = block(x, attention_mask)
        logits = self.head(self.norm(x))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
        return out

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = 50) -> torch.Tensor:
        """Sample `max_new_tokens` continuations of `prompt` (batch, length)."""
        ids = prompt
        for _ in range(max_new_tokens):
            context = ids[:, -self.cfg.max_seq_len:]
            logits = self(context)["logits"][:, -1, :].float() / max(temperature, 1e-5)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1, None]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = F.softmax(logits, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, num_samples=1)], dim=1)
        return ids

    def num_parameters(self, exclude_embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.embed.weight.numel()
        return n


def build_model(cfg: ModelConfig, device: torch.device | str) -> TinyGPT:
    return TinyGPT(cfg).to(device)


def freeze_lower_blocks(model: TinyGPT, n: int) -> list[nn.Parameter]:
    """Freeze the embeddings and the first `n` blocks; returns the parameters left trainable."""
    model.embed.requires_grad_(False)
    for block in model.blocks[:n]:
        block.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


def unfreeze_all(model: TinyGPT) -> None:
    model.requires_grad_(True)
