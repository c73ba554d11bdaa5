#!/usr/bin/env python3
"""Record the device allocations of PyTorch training steps, on the CPU, without memory.

For each model (VGG-16, ResNet-50, ResNet-152, a GPT-2-small-style transformer) at a
realistic batch size, this runs setup and two training iterations (zero_grad, forward, loss,
backward, Adam step) with every tensor on PyTorch's `meta` device, and writes the
storage allocations and frees in oversub's trace format (docs/trace-format.md).
Meta tensors have shapes, dtypes and storages but no memory and no arithmetic, so a
GPT-2 step that needs tens of GB on a GPU records in seconds on a laptop.

How it records (Note [Recording on meta] in docs/traces.md):
  - a TorchDispatchMode sees every aten operator the step runs, forward, backward
    (the autograd engine runs meta work on the caller's thread) and optimizer; each
    output tensor whose storage is not yet live is an allocation of that storage's
    bytes (views and in-place results share a live storage and allocate nothing);
  - every output tensor gets a weakref finalizer; a storage is freed when the last
    tensor seen on it dies. PyTorch keeps a tensor's Python object alive while C++
    (autograd's saved tensors, .grad) still holds it, so a finalizer runs when the
    tensor really goes, in the order reference counting frees it, as on a GPU;
  - parameters and buffers exist before the first iteration (setup records).

What is approximated (written into each trace's header too):
  - meta kernels stand for the CUDA ones: cuDNN/cuBLAS workspaces, cuDNN's batch-
    norm reserve space and algorithm-specific temporaries are not recorded;
  - sizes are storage bytes as requested; the CUDA caching allocator would round
    them (the benchmark's baseline allocator does);
  - Adam runs its single-tensor loop (foreach kernels on meta are not available in
    every PyTorch version); the foreach path allocates a few more temporaries;
  - the data loader's pinned host buffers and the copy to the device are replaced
    by allocating the batch on the device.

Needs torch and torchvision: Debian's python3-torch and python3-torchvision, so run
it with /usr/bin/python3. The traces are committed; nothing else needs torch.
"""
from __future__ import annotations

import argparse
import sys
import weakref
from pathlib import Path
from typing import Any, Callable


def import_torch() -> Any:
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"trace_torch_allocs: {e}; install python3-torch python3-torchvision "
                 "and run with /usr/bin/python3")
    return torch


torch = import_torch()
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

# Operators without a meta kernel: the same stand-ins as `oversub trace-torch`.
sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from torch_trace import run_without_meta_kernel  # noqa: E402

APPROXIMATIONS = [
    "meta kernels stand for CUDA ones: no cuDNN/cuBLAS workspaces or reserve space",
    "sizes are storage bytes as requested, before any allocator rounding",
    "Adam single-tensor loop (no foreach temporaries)",
    "the batch is allocated on the device (no pinned host staging)",
]


def storage_key(t: Any) -> int:
    return t.storage()._storage._cdata


class AllocRecorder(TorchDispatchMode):
    """Turns the storages of every operator's outputs into a/f trace records."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.live: dict[int, list[int]] = {}  # storage key -> [trace id, tensors alive]
        self.next_id = 0

    def track(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "meta":
            return
        key = storage_key(t)
        entry = self.live.get(key)
        if entry is None:
            entry = [self.next_id, 0]
            self.live[key] = entry
            self.lines.append(f"a {self.next_id} {t.storage()._storage.nbytes()}")
            self.next_id += 1
        entry[1] += 1
        weakref.finalize(t, self.release, key, entry[0])

    def release(self, key: int, trace_id: int) -> None:
        entry = self.live.get(key)
        if entry is None or entry[0] != trace_id:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.lines.append(f"f {trace_id}")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        try:
            out = func(*args, **(kwargs or {}))
        except NotImplementedError:
            out = run_without_meta_kernel(str(func), func, args, kwargs or {})
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


# ---- models ------------------------------------------------------------------

class Block(nn.Module):
    """One GPT-2 block: pre-LN causal self-attention and a GELU MLP, dropout 0.1."""

    def __init__(self, d: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).tril())

    def forward(self, x: Any) -> Any:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, s, h, d // h).transpose(1, 2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // h) ** 0.5)
        att = att.masked_fill(~self.mask[:s, :s], float("-inf")).softmax(dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).contiguous().view(b, s, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(nn.functional.gelu(self.fc(self.ln2(x)))))


class GPT2Small(nn.Module):
    """GPT-2 small's shapes: 12 layers, d 768, 12 heads, 1024 positions, 50257 tokens."""

    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, seq: int = 1024,
                 vocab: int = 50257) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, idx: Any) -> Any:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()  # tied output embedding


def image_batch(batch: int) -> Callable[[], tuple[Any, Any]]:
    def make() -> tuple[Any, Any]:
        x = torch.empty(batch, 3, 224, 224, device="meta")
        y = torch.empty(batch, dtype=torch.long, device="meta")
        return x, y
    return make


def token_batch(batch: int, seq: int) -> Callable[[], tuple[Any, Any]]:
    def make() -> tuple[Any, Any]:
        x = torch.empty(batch, seq, dtype=torch.long, device="meta")
        y = torch.empty(batch, seq, dtype=torch.long, device="meta")
        return x, y
    return make


def build(model: str, batch: int) -> tuple[Any, Callable[[], tuple[Any, Any]], str]:
    import torchvision
    if model == "vgg16":
        return torchvision.models.vgg16(), image_batch(batch), "VGG-16, 224x224 images"
    if model == "resnet50":
        return torchvision.models.resnet50(), image_batch(batch), "ResNet-50, 224x224 images"
    if model == "resnet152":
        return torchvision.models.resnet152(), image_batch(batch), "ResNet-152, 224x224 images"
    if model == "gpt2":
        return GPT2Small(), token_batch(batch, 1024), "GPT-2 small shapes, 1024 tokens"
    raise SystemExit(f"unknown model {model}")


def loss_of(model: str, out: Any, target: Any) -> Any:
    if model == "gpt2":
        return nn.functional.cross_entropy(out.view(-1, out.shape[-1]), target.view(-1))
    return nn.functional.cross_entropy(out, target)


def record(model_name: str, batch: int, iters: int) -> list[str]:
    model, make_batch, what = build(model_name, batch)
    model = model.to("meta")
    model.train()
    rec = AllocRecorder()
    for t in list(model.parameters()) + list(model.buffers()):
        rec.track(t)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    with rec:
        for it in range(iters):
            rec.lines.append(f"i {it}")
            opt.zero_grad(set_to_none=True)
            x, y = make_batch()
            loss = loss_of(model_name, model(x), y)
            loss.backward()
            opt.step()
            del x, y, loss
    header = [
        "# oversub allocation trace v1",
        f"# source: scripts/trace_torch_allocs.py --model {model_name} --batch {batch} "
        f"--iters {iters} (torch {torch.__version__}, meta device)",
        f"# model: {what}, batch {batch}, fp32, Adam, zero_grad(set_to_none=True)",
        "# what: storage allocations/frees of setup and each training iteration",
    ] + [f"# approximation: {a}" for a in APPROXIMATIONS]
    return header + rec.lines


MODELS = ["vgg16", "resnet50", "resnet152", "gpt2"]
DEFAULT_BATCH = {"vgg16": 64, "resnet50": 64, "resnet152": 32, "gpt2": 8}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", choices=MODELS,
                    help="model to record (repeatable; default: all)")
    ap.add_argument("--batch", type=int, default=0,
                    help="batch size (default: 64 images for VGG-16 and ResNet-50, 32 for "
                         "ResNet-152, 8 sequences of 1024 tokens for gpt2)")
    ap.add_argument("--iters", type=int, default=2, help="training iterations (default 2)")
    ap.add_argument("--out", type=Path, default=Path("tests/bench/fragmentation/traces"),
                    help="output folder (default: %(default)s)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for m in args.model or MODELS:
        batch = args.batch or DEFAULT_BATCH[m]
        lines = record(m, batch, args.iters)
        path = args.out / f"torch-{m}-b{batch}.trace"
        path.write_text("\n".join(lines) + "\n")
        allocs = sum(1 for line in lines if line.startswith("a "))
        print(f"{path}: {allocs} allocations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
