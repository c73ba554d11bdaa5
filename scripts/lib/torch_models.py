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
  tiny-cnn, tiny-mlp          small models for the tests (a few seconds)
"""
from __future__ import annotations

import math
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


def model_spec(name: str) -> ModelSpec | None:
    """MODELS[name], or a deep ResNet for 'resnet<depth>'; None for an unknown name."""
    if name in MODELS:
        return MODELS[name]
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
