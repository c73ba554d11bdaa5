#!/usr/bin/env python3
"""A deterministic PyTorch training loop for gpu-validate step 4 (plain torch only).

Two models, written here in plain torch: `cnn`, a ResNet-style network (a stem,
four stages of two basic residual blocks with batch norm, global mean pooling, a
linear head) on synthetic 64x64 images; and `gpt`, a GPT-style decoder (one-hot
token embedding, learned positions, pre-norm blocks of causal multi-head attention
and a GELU MLP) on synthetic token sequences. Fixed seeds, synthetic data made on
the host, torch.use_deterministic_algorithms(True) with CUBLAS_WORKSPACE_CONFIG
set, and only operations with deterministic CUDA kernels (no embedding, gather or
adaptive pooling backward, no fused attention), so two runs give the same loss bits.

Prints one line per iteration, `iter N loss X (bits 0x...)`, then samples/s over the
iterations after the first two, torch.cuda.max_memory_allocated, and a last line of
JSON starting with {"torch_train". An out-of-memory error prints `torch_train: out
of memory at iteration N: ...` and exits 3. `--device cpu --iters 2` runs a small
configuration on the CPU (the check gpu-validate --sim makes when torch imports).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class basic_block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


class resnet(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            for i in range(2):
                layers.append(basic_block(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class attention_block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class gpt(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Parameter(torch.randn(vocab, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(attention_block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, onehot_tokens: torch.Tensor) -> torch.Tensor:
        x = onehot_tokens @ self.embed + self.pos
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.norm(x))


def cross_entropy(logits: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy against one-hot targets (no gather: its backward scatters)."""
    return -(logits.log_softmax(dim=-1) * onehot).sum(dim=-1).mean()


def make_job(model: str, small: bool, batches: int, gen: torch.Generator):
    """The model, and `batches` (input, one-hot target) pairs made on the host."""
    if model == "cnn":
        width, size, batch, classes = (8, 16, 4, 10) if small else (64, 64, 128, 100)
        net = resnet(width, classes)
        data = []
        for _ in range(batches):
            x = torch.randn(batch, 3, size, size, generator=gen)
            y = torch.randint(0, classes, (batch,), generator=gen)
            data.append((x, F.one_hot(y, classes).float()))
        return net, data, batch
    vocab, seq, dim, layers, heads, batch = (64, 16, 32, 2, 2, 4) if small else (2048, 256, 768, 8, 12, 16)
    net = gpt(vocab, seq, dim, layers, heads)
    data = []
    for _ in range(batches):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
        data.append((F.one_hot(tokens[:, :-1], vocab).float(), F.one_hot(tokens[:, 1:], vocab).float()))
    return net, data, batch


def loss_bits(value: float) -> str:
    return "0x" + struct.pack(">f", value).hex()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("cnn", "gpt"), required=True)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="the small configuration (default on cpu)")
    args = parser.parse_args()
    small = args.small or args.device == "cpu"
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator().manual_seed(args.seed)
    device = torch.device(args.device)
    net, data, batch = make_job(args.model, small, min(args.iters, 4), gen)
    losses: list[float] = []
    timed_from = min(2, args.iters - 1)
    start = time.perf_counter()
    try:
        net = net.to(device)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=False)
        for it in range(args.iters):
            x, target = (t.to(device) for t in data[it % len(data)])
            if it == timed_from:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = cross_entropy(net(x), target)
            loss.backward()
            opt.step()
            value = loss.item()
            losses.append(value)
            print(f"iter {it} loss {value:.9e} (bits {loss_bits(value)})", flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except RuntimeError as error:  # torch.OutOfMemoryError is one; cuBLAS reports ALLOC_FAILED
        text = str(error)
        if "out of memory" not in text.lower() and "ALLOC_FAILED" not in text:
            raise
        print(f"torch_train: out of memory at iteration {len(losses)}: {text.splitlines()[0][:300]}",
              file=sys.stderr, flush=True)
        return 3
    seconds = time.perf_counter() - start
    timed = args.iters - timed_from
    samples_per_s = timed * batch / seconds if seconds > 0 else 0.0
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"samples/s: {samples_per_s:.1f} (iterations {timed_from}..{args.iters - 1})")
    print(f"max_memory_allocated: {peak}")
    print(json.dumps({"torch_train": 1, "model": args.model, "device": name, "torch": torch.__version__,
                      "small": small, "batch": batch, "iters": args.iters, "losses": losses,
                      "bits": [loss_bits(v) for v in losses], "samples_per_s": samples_per_s,
                      "max_memory_allocated": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
