"""The models `oversub trace-torch` records, each with its batch, loss and optimizer.

A model is built on PyTorch's meta device (no memory), in training mode, fp32:
  vgg16, resnet50, resnet152  torchvision's definitions, 224x224 RGB images, 1000
                              classes, cross-entropy, SGD with momentum 0.9 and
                              weight decay 1e-4 (as the papers trained them)
  gpt2                        GPT-2 small's shapes (12 layers, d 768, 12 heads, 1024
                              positions, 50257 tokens, tied output embedding), eager
                              attention, dropout 0.1, next-token cross-entropy, AdamW
  bert-large                  BERT-large's encoder (24 layers, d 1024, 16 heads, FFN
                              4096, 512 positions, 30522 tokens) with its masked-LM
                              head (tied decoder) over every position, AdamW
  bert-large-cls              the same encoder with BertForSequenceClassification's
                              pooler and 2-class head (the HF documentation's example)
  resnet50-256                ResNet-50 on 256x256 images (a published measurement's
                              configuration)
  resnet<D>                   a bottleneck ResNet of any depth D = 3 x blocks + 2 (D >= 50,
                              D - 2 divisible by 3) for deep-network studies such as
                              SuperNeurons' ResNet-2500: stages of [3, 4, blocks - 10, 3]
                              bottleneck blocks (the extra depth in the third stage, as
                              ResNet-101 does); resnet50 and resnet152 stay torchvision's
  llama3.2-1b, llama3.2-3b,   decoder-only LLMs as HF transformers runs them with
  llama3-8b, qwen2.5-7b       FlashAttention-2 (Decoder below), their published configs:
                              RMSNorm computed in fp32, rotary embeddings on q and k,
                              grouped-query attention in one fused operator that keeps no
                              s x s scores (Note [Fused attention op]), SwiGLU MLP, final
                              norm, LM head (tied for Llama 3.2, untied for Llama 3 8B and
                              Qwen2.5 7B; Qwen2.5's q/k/v have biases), logits in fp32,
                              next-token cross-entropy over every position (labels shifted
                              on the host, as HF's loss pads them), AdamW. Built directly
                              on meta. 2048 tokens unless the name ends in -s<tokens>:
                              `llama3-8b-s4096` is Llama 3 8B at 4096 tokens. Default batch
                              4 (1B), 2 (3B), 1 (8B, 7B): a fine-tuning run on one GPU
  tiny-decoder                a 2-layer decoder of the same code (d 64, 4 heads, 2 kv heads,
                              vocab 256) for the tests; takes -s<tokens> too
  tiny-cnn, tiny-mlp          small models for the tests (a few seconds)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F


# ---- transformers --------------------------------------------------------------------

class SelfAttention(nn.Module):
    """Multi-head self-attention written out (PyTorch 1.13 has no fused attention):
    scores, softmax and dropout of the probabilities are materialised as in the
    reference implementations (HF transformers' GPT-2 and BERT)."""

    def __init__(self, d: int, heads: int, causal_len: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)
        if causal_len:
            self.register_buffer("mask", torch.ones(causal_len, causal_len,
                                                    dtype=torch.bool).tril())
        else:
            self.mask = None

    def forward(self, x: Any, additive_mask: Any = None) -> Any:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, s, h, d // h).transpose(1, 2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        if self.mask is not None:
            att = att.masked_fill(~self.mask[:s, :s], float("-inf"))
        if additive_mask is not None:
            att = att + additive_mask
        att = self.drop(att.softmax(dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, d)
        return self.proj(y)


class GPTBlock(nn.Module):
    """Pre-LN: x + attn(ln(x)), x + mlp(ln(x)), GELU, dropout 0.1 after each."""

    def __init__(self, d: int, heads: int, seq: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, causal_len=seq)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Any) -> Any:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT2Small(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, seq: int = 1024,
                 vocab: int = 50257) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, idx: Any) -> Any:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()  # tied output embedding


class BertLayer(nn.Module):
    """Post-LN: ln(x + drop(attn(x))), ln(h + drop(ffn(h))), GELU."""

    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.fc, self.out = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Any, additive_mask: Any) -> Any:
        x = self.ln1(x + self.drop(self.attn(x, additive_mask)))
        return self.ln2(x + self.drop(self.out(F.gelu(self.fc(x)))))


class BertLarge(nn.Module):
    """BERT-large as HF transformers' BertModel runs it: embeddings (word, position,
    token type), LayerNorm, dropout, 24 post-LN layers whose attention scores get the
    extended attention mask added (all ones here: every token attends), then a head:
    'mlm' the masked-LM head (dense, GELU, LayerNorm, decoder tied to the word
    embedding) over every position; 'cls' BertForSequenceClassification's pooler
    (dense + tanh on the first token), dropout and a 2-class classifier."""

    def __init__(self, head: str = "mlm", layers: int = 24, d: int = 1024, heads: int = 16,
                 ffn: int = 4096, seq: int = 512, vocab: int = 30522) -> None:
        super().__init__()
        self.head_kind = head
        self.word, self.pos, self.token_type = (nn.Embedding(vocab, d), nn.Embedding(seq, d),
                                                nn.Embedding(2, d))
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList(BertLayer(d, heads, ffn) for _ in range(layers))
        if head == "mlm":
            self.head = nn.Linear(d, d)
            self.head_ln = nn.LayerNorm(d, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        else:
            self.pooler = nn.Linear(d, d)
            self.classifier = nn.Linear(d, 2)

    def forward(self, idx: Any) -> Any:
        b, s = idx.shape
        pos = torch.arange(s, device=idx.device)
        mask = torch.ones(b, s, device=idx.device)
        additive = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
        x = self.word(idx) + self.pos(pos) + self.token_type(torch.zeros_like(idx))
        x = self.drop(self.ln(x))
        for layer in self.layers:
            x = layer(x, additive)
        if self.head_kind == "mlm":
            h = self.head_ln(F.gelu(self.head(x)))
            return h @ self.word.weight.t() + self.decoder_bias  # tied decoder
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(self.drop(pooled))


# ---- decoder-only LLMs (Llama 3, Qwen2.5) -----------------------------------------------

# Note [Fused attention op]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# LLM fine-tuning runs attention in a fused kernel (FlashAttention-2, or PyTorch's SDPA
# flash / memory-efficient kernels) that never materialises the s x s scores: the forward
# keeps q, k, v, the output and the row logsumexp (batch, heads, s, fp32) for the
# backward, which recomputes the scores tile by tile. PyTorch 1.13 has no such kernel, so
# the decoders here call one custom operator each way, defined with torch.library and
# implemented for the meta device (and, as a reference for the tests, the CPU):
#   oversub::flash_attention(q, k, v, causal) -> (out, lse)
#   oversub::flash_attention_backward(grad_out, q, k, v, out, lse, causal)
#       -> (dq, dk, dv, softmax_d, dq_accum, dk_expanded, dv_expanded)
# q is (batch, s, heads, head_dim), k and v (batch, s, kv_heads, head_dim) with kv_heads
# dividing heads (grouped-query attention: k and v are never repeated), as
# flash_attn_func takes them. The backward's extra results are FlashAttention-2's
# workspace (csrc/flash_attn/flash_api.cpp, mha_bwd): softmax_d (batch, heads, s rounded
# up to 128, fp32), dq_accum (batch, heads, s rounded up to 128, head_dim, fp32) and, for
# grouped-query attention only, dk and dv at the full head count before they are summed
# over each group (empty otherwise); FlashAttention2.backward drops them at once, so the
# recorder sees them allocated by the backward launch and freed after it. The recorder
# records one launch each way (`oversub.flash_attention.default`,
# `oversub.flash_attention_backward.default`); their FLOPs are registered with
# torch_trace.register_op_flops as FlashAttention-2's paper counts them (Dao 2023,
# section 4.1): forward 4 * batch * heads * s^2 * head_dim, halved when causal; backward
# 2.5 times the forward. The same operator is used under PyTorch 2.x, so traces from
# either version agree. FlashAttention-2 itself takes only fp16/bf16 (--precision);
# in an fp32 trace the operator takes fp32 tensors as SDPA's memory-efficient kernel
# would, keeping the same q, k, v, out and fp32 logsumexp (its backward workspace
# differs from the one modeled here).

_LIB: Any = None
_SEQ_ROUND = 128


def _accumulate(t: Any) -> Any:
    """The reference's arithmetic dtype: fp32, or fp64 for fp64 inputs."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _attention_reference(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any, Any]:
    """Scores, probabilities and the output of plain attention, k and v repeated over each
    group: the CPU reference of the fused operator (tests only; it materialises s x s)."""
    b, s, h, d = q.shape
    rep = h // k.shape[2]
    acc = _accumulate(q)
    qh = q.transpose(1, 2).to(acc)
    kh = k.repeat_interleave(rep, dim=2).transpose(1, 2).to(acc)
    vh = v.repeat_interleave(rep, dim=2).transpose(1, 2).to(acc)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d)
    if causal:
        mask = torch.ones(s, k.shape[1], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(-1)
    return scores, probs, (probs @ vh)


def _flash_check(q: Any, k: Any, v: Any) -> None:
    """What FlashAttention-2's mha_fwd refuses: mixed dtypes, mismatched shapes, a
    head count not a multiple of the kv head count."""
    if not q.dtype == k.dtype == v.dtype:
        raise RuntimeError(f"flash_attention: q, k, v dtypes {q.dtype}, {k.dtype}, {v.dtype} "
                           "differ")
    if (q.dim() != 4 or k.shape != v.shape or k.shape[0] != q.shape[0]
            or k.shape[3] != q.shape[3] or q.shape[2] % k.shape[2]):
        raise RuntimeError(f"flash_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v "
                           f"{tuple(v.shape)}: expected (batch, s, heads, head_dim) and "
                           "(batch, s, kv_heads, head_dim), kv_heads dividing heads")


def _flash_meta(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    _flash_check(q, k, v)
    b, s, h, _ = q.shape
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty((b, h, s), dtype=torch.float32))


def _flash_backward_meta(grad_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                         causal: bool) -> tuple[Any, ...]:
    b, s, h, d = q.shape
    s_round = -(-s // _SEQ_ROUND) * _SEQ_ROUND
    grouped = k.shape[2] != h
    expanded = (b, k.shape[1], h, d) if grouped else (0,)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format),
            q.new_empty((b, h, s_round), dtype=torch.float32),
            q.new_empty((b, h, s_round, d), dtype=torch.float32),
            k.new_empty(expanded), v.new_empty(expanded))


def _flash_cpu(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    _flash_check(q, k, v)
    scores, _, out = _attention_reference(q, k, v, causal)
    return out.transpose(1, 2).to(q.dtype).contiguous(), scores.logsumexp(-1).float()


def _flash_backward_cpu(grad_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                        causal: bool) -> tuple[Any, ...]:
    """The gradients by hand from the probabilities (FlashAttention-2's algorithm 2
    without the tiling): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)),
    dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d), dK and dV summed over each group."""
    b, s, h, d = q.shape
    kv = k.shape[2]
    _, probs, _ = _attention_reference(q, k, v, causal)
    rep = h // kv
    acc = _accumulate(q)
    do = grad_out.transpose(1, 2).to(acc)
    o = out.transpose(1, 2).to(acc)
    qh = q.transpose(1, 2).to(acc)
    kh = k.repeat_interleave(rep, dim=2).transpose(1, 2).to(acc)
    vh = v.repeat_interleave(rep, dim=2).transpose(1, 2).to(acc)
    dv = probs.transpose(-2, -1) @ do
    dp = do @ vh.transpose(-2, -1)
    ds = probs * (dp - (do * o).sum(-1, keepdim=True))
    dq = ds @ kh / math.sqrt(d)
    dk = ds.transpose(-2, -1) @ qh / math.sqrt(d)

    def grouped(t: Any) -> Any:  # (b, h, s, d) -> (b, s, kv, d), summed over each group
        return t.transpose(1, 2).reshape(b, t.shape[2], kv, rep, d).sum(3).to(k.dtype)
    s_round = -(-s // _SEQ_ROUND) * _SEQ_ROUND
    empty = q.new_empty((b, k.shape[1], h, d) if kv != h else (0,))
    return (dq.transpose(1, 2).to(q.dtype).contiguous(), grouped(dk), grouped(dv),
            q.new_zeros((b, h, s_round), dtype=torch.float32),
            q.new_zeros((b, h, s_round, d), dtype=torch.float32), empty, empty.clone())


def _flash_forward_flops(args: tuple, kwargs: dict, out: Any) -> float:
    q, k, causal = args[0], args[1], args[3]
    b, s, h, d = q.shape
    flops = 4.0 * b * h * s * k.shape[1] * d
    return flops / 2 if causal else flops


def _flash_backward_flops(args: tuple, kwargs: dict, out: Any) -> float:
    return 2.5 * _flash_forward_flops(args[1:4] + (args[6],), kwargs, out)


def _below_autograd(op: str) -> Callable[..., Any]:
    def kernel(*args: Any) -> Any:
        guard = torch._C._AutoDispatchBelowAutograd()  # RAII: in force until deleted
        try:
            return getattr(torch.ops.oversub, op)(*args)
        finally:
            del guard
    return kernel


def _defined_elsewhere() -> bool:
    try:
        torch.ops.oversub.flash_attention
        return True
    except (AttributeError, RuntimeError):
        return False


def flash_attention_library() -> Any:
    """Defines the oversub::flash_attention operators once (Note [Fused attention op])
    and registers their FLOPs with the recorder."""
    global _LIB
    if _LIB is None and _defined_elsewhere():
        _LIB = True  # this file imported a second time under another module name
    if _LIB is None:
        lib = torch.library.Library("oversub", "DEF")
        lib.define("flash_attention(Tensor q, Tensor k, Tensor v, bool causal) "
                   "-> (Tensor, Tensor)")
        lib.define("flash_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, "
                   "Tensor out, Tensor lse, bool causal) "
                   "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
        lib.impl("flash_attention", _flash_meta, "Meta")
        lib.impl("flash_attention_backward", _flash_backward_meta, "Meta")
        lib.impl("flash_attention", _flash_cpu, "CPU")
        lib.impl("flash_attention_backward", _flash_backward_cpu, "CPU")
        # PyTorch 1.13 has no autograd fallthrough for the meta device: go below
        # autograd (FlashAttention2 is the autograd formula)
        for op in ("flash_attention", "flash_attention_backward"):
            lib.impl(op, _below_autograd(op), "AutogradMeta")
        _LIB = lib
        try:
            from torch_trace import register_op_flops
        except ImportError:  # torch_models used without the recorder beside it
            register_op_flops = None
        if register_op_flops is not None:
            register_op_flops("oversub.flash_attention.default", _flash_forward_flops)
            register_op_flops("oversub.flash_attention_backward.default",
                              _flash_backward_flops)
    return _LIB


class FlashAttention2(torch.autograd.Function):
    """The fused attention operator with its fused backward (Note [Fused attention op])."""

    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, causal: bool) -> Any:  # type: ignore[override]
        out, lse = torch.ops.oversub.flash_attention(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Any:  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, *_workspace = torch.ops.oversub.flash_attention_backward(
            grad_out.contiguous(), q, k, v, out, lse, ctx.causal)
        return dq, dk, dv, None


def flash_attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """Fused attention, q (batch, s, heads, head_dim), k and v (batch, s, kv_heads,
    head_dim): the output (batch, s, heads, head_dim)."""
    flash_attention_library()
    return FlashAttention2.apply(q, k, v, causal)


@dataclass(frozen=True)
class DecoderConfig:
    """A Llama-style decoder's published shapes (the model's config.json)."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool             # tie_word_embeddings
    qkv_bias: bool = False  # Qwen2's q/k/v projections have biases
    eps: float = 1e-5       # rms_norm_eps
    rope_theta: float = 500000.0


# PyTorch 1.13's autograd keeps mean.dim's whole input for its backward (it needs only
# the element count; 2.x saves the count): x.pow(2) of every RMSNorm, a hidden-sized fp32
# tensor, would be held to the backward. Under 1.x the mean is a sum and an in-place
# division, which keep nothing large, so the trace holds what PyTorch 2.x holds.
_MEAN_SAVES_INPUT = int(torch.__version__.split(".")[0]) < 2


class RMSNorm(nn.Module):
    """LlamaRMSNorm (and Qwen2RMSNorm): computed in fp32 whatever the input's dtype, the
    result cast back before the weight multiplies it."""

    def __init__(self, d: int, eps: float, device: Any = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=device))
        self.eps = eps

    def forward(self, x: Any) -> Any:
        dtype = x.dtype
        x = x.to(torch.float32)
        if _MEAN_SAVES_INPUT:
            variance = torch.ops.aten.div.Scalar(x.pow(2).sum(-1, keepdim=True), x.shape[-1])
        else:
            variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderAttention(nn.Module):
    """Grouped-query attention: q from heads x head_dim outputs, k and v from kv_heads x
    head_dim; rotary position embeddings on q and k; the fused operator (Note [Fused
    attention op]); the output projection (no bias)."""

    def __init__(self, c: DecoderConfig, device: Any = None) -> None:
        super().__init__()
        self.heads, self.kv_heads = c.heads, c.kv_heads
        self.head_dim = c.hidden // c.heads
        kv = c.kv_heads * self.head_dim
        self.q_proj = nn.Linear(c.hidden, c.heads * self.head_dim, c.qkv_bias, device)
        self.k_proj = nn.Linear(c.hidden, kv, c.qkv_bias, device)
        self.v_proj = nn.Linear(c.hidden, kv, c.qkv_bias, device)
        self.o_proj = nn.Linear(c.heads * self.head_dim, c.hidden, False, device)

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim)
        # apply_rotary_pos_emb: cos and sin (b, s, 1, head_dim) broadcast over the heads
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        # fp32 cos/sin promote q and k under autocast; HF casts them back to the
        # projections' dtype before the flash kernel (v's dtype here)
        y = flash_attention(q.to(v.dtype), k.to(v.dtype), v, True)
        return self.o_proj(y.view(b, s, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    """LlamaMLP: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, c: DecoderConfig, device: Any = None) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, False, device)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, False, device)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, False, device)

    def forward(self, x: Any) -> Any:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm: x + attn(norm(x)), x + mlp(norm(x))."""

    def __init__(self, c: DecoderConfig, device: Any = None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps, device)
        self.self_attn = DecoderAttention(c, device)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps, device)
        self.mlp = SwiGLU(c, device)

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """LlamaForCausalLM / Qwen2ForCausalLM as HF transformers runs them with
    attn_implementation="flash_attention_2": token embedding, the rotary cos/sin computed
    once per forward in fp32 (LlamaRotaryEmbedding) and cast to the activations' dtype,
    the layers, the final RMSNorm, the LM head (tied to the embedding where the
    published model ties them), logits upcast to fp32 (`.float()`) for the loss. Built
    on the meta device unless told otherwise (an 8B model's fp32 weights are 32 GB)."""

    def __init__(self, c: DecoderConfig, device: Any = "meta") -> None:
        super().__init__()
        self.config = c
        flash_attention_library()  # the operator and its FLOPs, before any recording
        head_dim = c.hidden // c.heads
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden, device=device)
        self.layers = nn.ModuleList(DecoderLayer(c, device) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps, device)
        self.lm_head = nn.Linear(c.hidden, c.vocab, False, device)
        if c.tied:
            self.lm_head.weight = self.embed_tokens.weight
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, head_dim, 2, device=device).float()
                                           / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, idx: Any) -> Any:
        b, s = idx.shape
        x = self.embed_tokens(idx)
        positions = torch.arange(s, device=idx.device, dtype=torch.float32).expand(b, s)
        freqs = positions[:, :, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos().to(x.dtype)[:, :, None, :]
        sin = emb.sin().to(x.dtype)[:, :, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x)).float()


# Published configs (config.json of each model on the Hugging Face hub).
LLAMA32_1B = DecoderConfig(2048, 16, 32, 8, 8192, 128256, tied=True)
LLAMA32_3B = DecoderConfig(3072, 28, 24, 8, 8192, 128256, tied=True)
LLAMA3_8B = DecoderConfig(4096, 32, 32, 8, 14336, 128256, tied=False)
QWEN25_7B = DecoderConfig(3584, 28, 28, 4, 18944, 152064, tied=False, qkv_bias=True,
                          eps=1e-6, rope_theta=1000000.0)
TINY_DECODER = DecoderConfig(64, 2, 4, 2, 128, 256, tied=False, qkv_bias=True)

# name: (config, title, default batch, published parameter count or 0)
DECODERS: dict[str, tuple[DecoderConfig, str, int, int]] = {
    "llama3.2-1b": (LLAMA32_1B, "Llama 3.2 1B", 4, 1_235_814_400),
    "llama3.2-3b": (LLAMA32_3B, "Llama 3.2 3B", 2, 3_212_749_824),
    "llama3-8b": (LLAMA3_8B, "Llama 3 8B", 1, 8_030_261_248),
    "qwen2.5-7b": (QWEN25_7B, "Qwen2.5 7B", 1, 7_615_616_512),
    "tiny-decoder": (TINY_DECODER, "a 2-layer Llama-style decoder (d 64, 4 heads, 2 kv "
                     "heads, vocab 256) for the tests", 2, 0),
}
DECODER_SEQ = 2048      # default sequence length of the decoders


# ---- small models for the tests --------------------------------------------------------

class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x: Any) -> Any:
        return self.fc(torch.flatten(self.features(x), 1))


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 10))


# ---- the catalogue ---------------------------------------------------------------------

@dataclass
class ModelSpec:
    key: str
    title: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[Any, Any]]     # batch -> (input, target) on meta
    loss: Callable[[Any, Any], Any]
    optimizer: Callable[[Any], Any]
    default_batch: int
    seq: int | None = None      # tokens per sample, for the sequence models that take it


def _images(size: int, classes: int) -> Callable[[int], tuple[Any, Any]]:
    def make(batch: int) -> tuple[Any, Any]:
        return (torch.empty(batch, 3, size, size, device="meta"),
                torch.empty(batch, dtype=torch.long, device="meta"))
    return make


def _tokens(seq: int) -> Callable[[int], tuple[Any, Any]]:
    def make(batch: int) -> tuple[Any, Any]:
        return (torch.empty(batch, seq, dtype=torch.long, device="meta"),
                torch.empty(batch, seq, dtype=torch.long, device="meta"))
    return make


def _tokens_label(seq: int) -> Callable[[int], tuple[Any, Any]]:
    def make(batch: int) -> tuple[Any, Any]:
        return (torch.empty(batch, seq, dtype=torch.long, device="meta"),
                torch.empty(batch, dtype=torch.long, device="meta"))
    return make


def _features(n: int, classes: int) -> Callable[[int], tuple[Any, Any]]:
    def make(batch: int) -> tuple[Any, Any]:
        return (torch.empty(batch, n, device="meta"),
                torch.empty(batch, dtype=torch.long, device="meta"))
    return make


def _ce(out: Any, target: Any) -> Any:
    return F.cross_entropy(out, target)


def _ce_tokens(out: Any, target: Any) -> Any:
    return F.cross_entropy(out.view(-1, out.shape[-1]), target.view(-1))


def _sgd(params: Any) -> Any:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)


def _adamw(params: Any) -> Any:
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision
        return getattr(torchvision.models, name)()
    return build


MODELS: dict[str, ModelSpec] = {m.key: m for m in [
    ModelSpec("vgg16", "VGG-16 (torchvision), 224x224 images, SGD momentum",
              _torchvision("vgg16"), _images(224, 1000), _ce, _sgd, 64),
    ModelSpec("resnet50", "ResNet-50 (torchvision), 224x224 images, SGD momentum",
              _torchvision("resnet50"), _images(224, 1000), _ce, _sgd, 32),
    ModelSpec("resnet152", "ResNet-152 (torchvision), 224x224 images, SGD momentum",
              _torchvision("resnet152"), _images(224, 1000), _ce, _sgd, 32),
    ModelSpec("gpt2", "GPT-2 small shapes, 1024 tokens, AdamW", GPT2Small, _tokens(1024),
              _ce_tokens, _adamw, 8),
    ModelSpec("bert-large", "BERT-large encoder + masked-LM head, 512 tokens, AdamW",
              lambda: BertLarge("mlm"), _tokens(512), _ce_tokens, _adamw, 32),
    ModelSpec("bert-large-cls", "BERT-large BertForSequenceClassification shapes (2 "
              "classes), 512 tokens, AdamW", lambda: BertLarge("cls"), _tokens_label(512), _ce,
              _adamw, 4),
    ModelSpec("resnet50-256", "ResNet-50 (torchvision), 256x256 images, SGD momentum",
              _torchvision("resnet50"), _images(256, 1000), _ce, _sgd, 96),
    ModelSpec("tiny-cnn", "two conv/BN/ReLU layers on 32x32 images, SGD momentum",
              TinyCNN, _images(32, 10), _ce, _sgd, 8),
    ModelSpec("tiny-mlp", "256-512-10 MLP with dropout, AdamW", tiny_mlp, _features(256, 10),
              _ce, _adamw, 16),
]}


def _deep_resnet(depth: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from torchvision.models.resnet import Bottleneck, ResNet
        blocks = (depth - 2) // 3
        return ResNet(Bottleneck, [3, 4, blocks - 10, 3])
    return build


def _decoder_spec(name: str, seq: int) -> ModelSpec:
    c, title, batch, _ = DECODERS[name]
    bias = ", q/k/v biases" if c.qkv_bias else ""
    return ModelSpec(
        name if seq == DECODER_SEQ else f"{name}-s{seq}",
        f"{title} (d {c.hidden}, {c.layers} layers, {c.heads} heads, {c.kv_heads} kv heads, "
        f"SwiGLU {c.intermediate}, vocab {c.vocab}, {'tied' if c.tied else 'untied'} "
        f"embeddings{bias}), fused causal attention, {seq} tokens, AdamW",
        lambda: Decoder(c), _tokens(seq), _ce_tokens, _adamw, batch, seq)


MODELS.update({name: _decoder_spec(name, DECODER_SEQ) for name in DECODERS})


def decoder_name(name: str) -> tuple[str, int] | None:
    """(decoder, sequence length) of 'llama3-8b' or 'llama3-8b-s4096'; None otherwise."""
    base, seq = name, DECODER_SEQ
    m = re.fullmatch(r"(.+)-s([0-9]+)", name)
    if m and m.group(1) in DECODERS:
        base, seq = m.group(1), int(m.group(2))
    if base not in DECODERS or seq < 1:
        return None
    return base, seq


def model_spec(name: str) -> ModelSpec | None:
    """MODELS[name], a decoder with an optional sequence length ('llama3-8b-s4096'), or
    a deep ResNet for 'resnet<depth>'; None for an unknown name."""
    if name in MODELS:
        return MODELS[name]
    decoder = decoder_name(name)
    if decoder is not None:
        return _decoder_spec(*decoder)
    if name.startswith("resnet") and name[6:].isdigit():
        depth = int(name[6:])
        if depth >= 50 and (depth - 2) % 3 == 0:
            return ModelSpec(name, f"ResNet-{depth} (bottleneck stages [3, 4, "
                             f"{(depth - 2) // 3 - 10}, 3]), 224x224 images, SGD momentum",
                             _deep_resnet(depth), _images(224, 1000), _ce, _sgd, 32)
    return None


def training_step(spec: ModelSpec, batch: int) -> tuple[nn.Module, Callable[[Any], None]]:
    """The model on meta and one training iteration over it: zero_grad (PyTorch 1.13's
    default, gradients kept and zeroed), the batch copied in, forward, loss, backward,
    optimizer step."""
    model = spec.build().to("meta")
    model.train()
    opt = spec.optimizer(model.parameters())

    def step(rec: Any) -> None:
        opt.zero_grad(set_to_none=False)
        x, y = spec.inputs(batch)
        rec.copy_in(x)
        rec.copy_in(y)
        loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()

    return model, step
