"""The MTP head's modules in PyTorch (``Qwen3_5MultiTokenPredictor`` as vLLM 0.26.0 runs
it; what it reads and why: ``mtp.py``). A module of its own so that ``mtp.py``'s names and
shapes import without torch: ``mtp._torch_modules`` imports this one when a head is built."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ZeroCentredRMSNorm(nn.Module):
    """Qwen3.5 RMSNorm: weight stored around 0, applied as ``1 + w`` (fp32 math)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class Attention(nn.Module):
    """Qwen3.5 full attention (gated q, per-head q/k norms, partial RoPE, GQA).

    ``forward`` takes the keys/values of the earlier draft steps (``history``) so step
    s > 1 attends as in vLLM's proposer: to the first pass's keys at positions up to the
    chain's start, then to the keys each later step wrote (see ``staircase``)."""

    def __init__(self, tc: dict):
        super().__init__()
        h, self.heads = tc["hidden_size"], tc["num_attention_heads"]
        self.kv, self.hd = tc["num_key_value_heads"], tc.get("head_dim") or h // self.heads
        eps = tc["rms_norm_eps"]
        self.q_proj = nn.Linear(h, 2 * self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, h, bias=False)
        self.q_norm = ZeroCentredRMSNorm(self.hd, eps)
        self.k_norm = ZeroCentredRMSNorm(self.hd, eps)

    def project(self, x, cos, sin):
        """q, output gate, k, v ([B, heads, T, D]; k / v repeated over the GQA groups)."""
        b, t, _ = x.shape
        q, gate = torch.chunk(self.q_proj(x).view(b, t, self.heads, 2 * self.hd), 2, dim=-1)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        rep = self.heads // self.kv
        return q, gate.reshape(b, t, -1), k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def finish(self, o, gate):
        b, _, t, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1) * torch.sigmoid(gate))

    def forward(self, x, cos, sin, history):
        q, gate, k, v = self.project(x, cos, sin)
        history.append((k, v))
        if len(history) == 1:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = staircase(q, history, self.hd ** -0.5)
        return self.finish(o, gate)


class MLP(nn.Module):
    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, tc: dict):
        super().__init__()
        h, eps = tc["hidden_size"], tc["rms_norm_eps"]
        self.input_layernorm = ZeroCentredRMSNorm(h, eps)
        self.self_attn = Attention(tc)
        self.post_attention_layernorm = ZeroCentredRMSNorm(h, eps)
        self.mlp = MLP(h, tc["intermediate_size"])

    def forward(self, x, cos, sin, history):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, history)
        return x + self.mlp(self.post_attention_layernorm(x))


class MTPHead(nn.Module):
    """``Qwen3_5MultiTokenPredictor`` as vLLM runs it; parameter names are the
    checkpoint's without the ``mtp.`` prefix."""

    def __init__(self, tc: dict):
        super().__init__()
        h, eps = tc["hidden_size"], tc["rms_norm_eps"]
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = ZeroCentredRMSNorm(h, eps)
        self.pre_fc_norm_hidden = ZeroCentredRMSNorm(h, eps)
        self.layers = nn.ModuleList(Layer(tc) for _ in range(int(tc.get("mtp_num_hidden_layers", 1))))
        self.norm = ZeroCentredRMSNorm(h, eps)
        rp = tc["rope_parameters"]
        hd = tc.get("head_dim") or h // tc["num_attention_heads"]
        dim = int(hd * rp.get("partial_rotary_factor", 1.0))
        self.register_buffer("inv_freq", 1.0 / (rp["rope_theta"] ** (
            torch.arange(0, dim, 2, dtype=torch.float) / dim)), persistent=False)

    def rope(self, t: int, dtype, device, offset: int = 0):
        pos = torch.arange(offset, offset + t, device=device, dtype=torch.float)
        freqs = pos[:, None] * self.inv_freq[None, :]
        ang = torch.cat([freqs, freqs], dim=-1)
        return ang.cos().to(dtype)[None, None], ang.sin().to(dtype)[None, None]

    def step(self, emb, hidden, history, step_idx: int = 0):
        """One draft step over every position: ``emb`` = embeddings of the tokens one
        ahead, ``hidden`` = the target's (step 0) or the head's previous output, shifted
        to the same positions. Returns the head's output (after ``norm``)."""
        cos, sin = self.rope(emb.shape[1], emb.dtype, emb.device)
        x = torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(hidden)], -1)
        x = self.fc(x)
        x = self.layers[step_idx % len(self.layers)](x, cos, sin, history)
        return self.norm(x)


def _rope(x, cos, sin):
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return torch.cat([xr * cos + rot * sin, xp], dim=-1)


def staircase(q, history, scale):
    """Attention of draft step s = len(history) at every position p, for the chain that
    started at t = p - s + 1: the first pass's keys at positions <= t (vLLM's first
    proposer pass writes those from the target's hidden states), plus the key each step
    i = 2..s wrote at position t + i - 1 (in this parallel layout: step i's own key at
    p - (s - i))."""
    s = len(history)
    k1, v1 = history[0]
    T = q.shape[2]
    scores = torch.matmul(q, k1.transpose(2, 3)) * scale
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-(s - 1))
    scores = scores.masked_fill(~allowed, float("-inf"))
    extra_s, extra_v = [], []
    for i in range(2, s + 1):
        shift = s - i
        ki, vi = history[i - 1]
        if shift:
            ki = F.pad(ki, (0, 0, shift, 0))[:, :, :T]
            vi = F.pad(vi, (0, 0, shift, 0))[:, :, :T]
        e = (q * ki).sum(-1) * scale
        if shift:
            e[:, :, :shift] = float("-inf")
        extra_s.append(e)
        extra_v.append(vi)
    probs = torch.softmax(torch.cat([scores, torch.stack(extra_s, -1)], -1).float(), -1)
    probs = probs.to(q.dtype)
    out = torch.matmul(probs[..., :T], v1)
    for j, vi in enumerate(extra_v):
        out = out + probs[..., T + j, None] * vi
    return out
