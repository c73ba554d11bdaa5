#!/usr/bin/env python3
"""A PyTorch training loop for gpu-validate step 4: plain torch, and the configurations users train with.

Three models. `cnn`, a ResNet-style network (a stem, four stages of two basic
residual blocks with batch norm, global mean pooling, a linear head) on synthetic
64x64 images, and `gpt`, a GPT-style decoder (one-hot token embedding, learned
positions, pre-norm blocks of causal multi-head attention and a GELU MLP) on
synthetic token sequences, are written here in plain torch with only operations
that have deterministic CUDA kernels (no embedding, gather or adaptive pooling
backward, no fused attention). `llama` is transformers' LlamaForCausalLM built
from a LlamaConfig (no weights loaded; `--size small`: hidden 512, 4 layers;
`medium`: hidden 1024, 8 layers with grouped-query attention; vocabulary 32000;
transformers' default attention, SDPA) on synthetic tokens, its loss the one the
model returns for labels; without transformers it prints `torch_train:
transformers is not importable: ...` and exits 4.

The options users train with: `--optimizer adamw` (torch.optim.AdamW with
foreach=True, llama's default) or `adamw-loop` (foreach=False, the default of cnn
and gpt, whose loss bits earlier results hold); `--amp bf16` (forward and loss under
torch.autocast to bfloat16, on the CPU too); `--sdpa` (gpt's attention through
F.scaled_dot_product_attention, causal, in place of the explicit softmax);
`--compile default|reduce-overhead` (torch.compile(model, mode=...), on the CPU
too, slowly); `--profiler` (the last two iterations inside torch.profiler.profile
with CPU and, on a GPU, CUDA activities; the JSON says how many CUDA events it
recorded, so a run under the library tells whether the profiler still sees kernels).

Determinism: seeds are fixed and the data is made on the host. Without --amp and
--compile the run asks for torch.use_deterministic_algorithms(True) (with
CUBLAS_WORKSPACE_CONFIG set): two runs give the same loss bits, and the JSON says
`"deterministic": true`. Should an operation have no deterministic implementation
(transformers' model may pick one), the run starts again from the seed without
deterministic algorithms, names the operation in `nondeterministic_ops` and says
`"deterministic": false`. With --amp or --compile it is false: bfloat16 rounding
and compiled kernels make no promise of the same bits across runs, so those runs
are left as users run them, without deterministic algorithms.

Prints one line per iteration, `iter N loss X (bits 0x...)`, then samples/s over the
iterations after the first two (and before the profiled ones),
torch.cuda.max_memory_allocated, and a last line of JSON starting with
{"torch_train". An out-of-memory error prints `torch_train: out of memory at
iteration N: ...` and exits 3. `--device cpu` runs a small configuration on the CPU
(`--iters 2` is the check gpu-validate --sim makes when torch imports).
"""
from __future__ import annotations

import argparse
import contextlib
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
    def __init__(self, dim: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            # PyTorch picks the kernel (flash, memory-efficient, cuDNN or math) by
            # dtype, shape and device, as it does for users.
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
            out = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(out.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class gpt(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int, sdpa: bool = False) -> None:
        super().__init__()
        self.embed = nn.Parameter(torch.randn(vocab, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(attention_block(dim, heads, sdpa) for _ in range(layers))
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


class transformers_missing(Exception):
    """--model llama without an importable transformers."""


# LlamaConfig sizes: (hidden, intermediate, layers, heads, key/value heads,
# sequence, batch). medium uses grouped-query attention, as current Llama models do.
LLAMA_SIZES = {
    "small": (512, 1408, 4, 8, 8, 256, 8),
    "medium": (1024, 2816, 8, 16, 8, 512, 8),
}
LLAMA_VOCAB = 32000


def make_llama(size: str, small: bool, batches: int, gen: torch.Generator):
    """transformers' LlamaForCausalLM from a config (random weights from the seed) and
    `batches` token batches; the model shifts the labels itself."""
    try:
        import transformers
    except ImportError as error:
        raise transformers_missing(str(error)) from error
    hidden, inter, layers, heads, kv_heads, seq, batch = LLAMA_SIZES[size]
    if small:  # the CPU check: the config of --size, a short sequence and batch
        seq, batch = 32, 2
    config = transformers.LlamaConfig(
        vocab_size=LLAMA_VOCAB, hidden_size=hidden, intermediate_size=inter,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=seq, tie_word_embeddings=False)
    net = transformers.LlamaForCausalLM(config)
    data = []
    for _ in range(batches):
        tokens = torch.randint(0, LLAMA_VOCAB, (batch, seq), generator=gen)
        data.append((tokens, tokens))
    attention = getattr(net.config, "_attn_implementation", None) or "default"
    info = {"size": size, "seq": seq, "transformers": transformers.__version__, "attention": attention,
            "parameters": sum(p.numel() for p in net.parameters())}
    return net, data, batch, lambda out, target: out.loss, lambda m, x, target: m(input_ids=x, labels=target), info


def make_job(model: str, small: bool, batches: int, gen: torch.Generator, size: str = "small",
             sdpa: bool = False):
    """The model, `batches` (input, target) pairs made on the host, the batch size, the
    loss of an output, the call of the model and facts for the JSON."""
    call = lambda m, x, target: m(x)  # noqa: E731
    if model == "llama":
        return make_llama(size, small, batches, gen)
    if model == "cnn":
        width, size_px, batch, classes = (8, 16, 4, 10) if small else (64, 64, 128, 100)
        net = resnet(width, classes)
        data = []
        for _ in range(batches):
            x = torch.randn(batch, 3, size_px, size_px, generator=gen)
            y = torch.randint(0, classes, (batch,), generator=gen)
            data.append((x, F.one_hot(y, classes).float()))
        return net, data, batch, cross_entropy, call, {}
    vocab, seq, dim, layers, heads, batch = (64, 16, 32, 2, 2, 4) if small else (2048, 256, 768, 8, 12, 16)
    net = gpt(vocab, seq, dim, layers, heads, sdpa)
    data = []
    for _ in range(batches):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
        data.append((F.one_hot(tokens[:, :-1], vocab).float(), F.one_hot(tokens[:, 1:], vocab).float()))
    return net, data, batch, cross_entropy, call, {"sdpa": sdpa}


def loss_bits(value: float) -> str:
    return "0x" + struct.pack(">f", value).hex()


class nondeterministic(Exception):
    """An operation with no deterministic implementation under use_deterministic_algorithms."""


def is_nondeterministic(error: BaseException) -> bool:
    text = str(error)
    return ("does not have a deterministic implementation" in text or "non-deterministic" in text
            or ("use_deterministic_algorithms" in text and "out of memory" not in text.lower()))


def count_profiler_events(prof, device: torch.device) -> dict:
    """How many events torch.profiler recorded: CPU operators, and the events on the
    device (kernels, copies, memsets) that CUPTI gave it."""
    events = list(prof.events())
    cuda_type = getattr(torch.autograd.DeviceType, "CUDA", None)
    on_device = [e for e in events if getattr(e, "device_type", None) == cuda_type]
    names: list[str] = []
    for e in on_device:
        if e.name not in names and len(names) < 3:
            names.append(e.name[:80])
    return {"profiler_cuda_events": len(on_device), "profiler_cpu_events": len(events) - len(on_device),
            "profiler_cuda_names": names}


def train(args, device: torch.device, small: bool, deterministic: bool, losses: list[float]) -> dict:
    """Builds the job from the seed and trains it, appending each iteration's loss to
    `losses`; the JSON's other fields. Raises `nondeterministic` when deterministic
    algorithms were asked for and an operation has none."""
    torch.manual_seed(args.seed)
    # Strict: an operation without a deterministic kernel raises, and main starts again
    # without them, rather than let a warning pass for bit-identical losses.
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator().manual_seed(args.seed)
    net, data, batch, loss_of, call, info = make_job(args.model, small, min(args.iters, 4), gen,
                                                    args.size, args.sdpa)
    amp = (torch.autocast(device.type, dtype=torch.bfloat16) if args.amp == "bf16"
           else contextlib.nullcontext())
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    # CUDA graphs (reduce-overhead) reuse their output buffers: each iteration says
    # it begins, so the previous iteration's outputs may be overwritten.
    mark_step = mark_step if args.compile == "reduce-overhead" and device.type == "cuda" else None
    timed_from = min(2, args.iters - 1)
    prof_from = max(0, args.iters - 2) if args.profiler else None
    # The profiled iterations are left out of samples/s when other iterations remain.
    timed_to = prof_from if prof_from is not None and prof_from > timed_from else args.iters
    start, seconds, prof, prof_facts = time.perf_counter(), 0.0, None, {}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    net = net.to(device)
    model = torch.compile(net, mode=args.compile) if args.compile != "none" else net
    foreach = args.optimizer == "adamw"
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=foreach)
    try:
        for it in range(args.iters):
            x, target = (t.to(device) for t in data[it % len(data)])
            if it == timed_from:
                sync()
                start = time.perf_counter()
            if it == timed_to:
                sync()
                seconds = time.perf_counter() - start
            if it == prof_from:
                acts = [torch.profiler.ProfilerActivity.CPU]
                if device.type == "cuda":
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                try:
                    prof = torch.profiler.profile(activities=acts)
                    prof.__enter__()
                except Exception as error:  # noqa: BLE001 - the JSON reports it
                    prof, prof_facts = None, {"profiler_error": f"{type(error).__name__}: {error}"[:300]}
            if mark_step is not None:
                mark_step()
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = loss_of(call(model, x, target), target)
            loss.backward()
            opt.step()
            value = loss.detach().float().item()
            losses.append(value)
            print(f"iter {it} loss {value:.9e} (bits {loss_bits(value)})", flush=True)
        sync()
        if timed_to == args.iters:
            seconds = time.perf_counter() - start
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
                prof_facts = count_profiler_events(prof, device)
            except Exception as error:  # noqa: BLE001
                prof_facts = {"profiler_error": f"{type(error).__name__}: {error}"[:300]}
    except RuntimeError as error:
        if deterministic and is_nondeterministic(error):
            if prof is not None:  # main starts again, and a second profiler would not start
                with contextlib.suppress(Exception):
                    prof.__exit__(None, None, None)
            raise nondeterministic(str(error).splitlines()[0][:300]) from None
        raise
    timed = timed_to - timed_from
    facts = {"batch": batch, "samples_per_s": timed * batch / seconds if seconds > 0 else 0.0,
             "timed": [timed_from, timed_to - 1], **info}
    if args.profiler:
        facts.update({"profiler_iterations": [prof_from, args.iters - 1], "profiler_cuda_events": 0,
                      **prof_facts})
    return facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("cnn", "gpt", "llama"), required=True)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="the small configuration (default on cpu)")
    parser.add_argument("--size", choices=tuple(LLAMA_SIZES), default=None,
                        help="llama's config (default: medium on cuda, small on cpu)")
    parser.add_argument("--optimizer", choices=("adamw-loop", "adamw"), default=None,
                        help="adamw: AdamW(foreach=True) (llama's default); adamw-loop: "
                             "AdamW(foreach=False) (cnn's and gpt's default)")
    parser.add_argument("--amp", choices=("none", "bf16"), default="none",
                        help="bf16: forward and loss under torch.autocast(dtype=torch.bfloat16)")
    parser.add_argument("--sdpa", action="store_true",
                        help="gpt: attention through F.scaled_dot_product_attention")
    parser.add_argument("--compile", choices=("none", "default", "reduce-overhead"), default="none",
                        help="torch.compile(model, mode=...)")
    parser.add_argument("--profiler", action="store_true",
                        help="the last two iterations under torch.profiler.profile (CPU and CUDA)")
    args = parser.parse_args()
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    if args.sdpa and args.model != "gpt":
        parser.error("--sdpa is gpt's (cnn has no attention; llama takes transformers' default, SDPA)")
    small = args.small or args.device == "cpu"
    args.size = args.size or ("small" if args.device == "cpu" else "medium")
    args.optimizer = args.optimizer or ("adamw" if args.model == "llama" else "adamw-loop")
    device = torch.device(args.device)
    # bfloat16 rounding and compiled kernels promise no bit-identical losses.
    deterministic = args.amp == "none" and args.compile == "none"
    nondeterministic_ops: list[str] = []
    losses: list[float] = []
    try:
        facts = None
        try:
            facts = train(args, device, small, deterministic, losses)
        except nondeterministic as why:
            # The first attempt's tensors go with its traceback, at the end of this block.
            print(f"torch_train: restarting without deterministic algorithms: {why}", file=sys.stderr, flush=True)
            nondeterministic_ops.append(str(why))
        if facts is None:
            deterministic = False
            losses.clear()
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            facts = train(args, device, small, deterministic, losses)
    except transformers_missing as error:
        print(f"torch_train: transformers is not importable: {error}", file=sys.stderr, flush=True)
        return 4
    except RuntimeError as error:  # torch.OutOfMemoryError is one; cuBLAS reports ALLOC_FAILED
        text = str(error)
        if "out of memory" not in text.lower() and "ALLOC_FAILED" not in text:
            raise
        print(f"torch_train: out of memory at iteration {len(losses)}: {text.splitlines()[0][:300]}",
              file=sys.stderr, flush=True)
        return 3
    samples_per_s = facts.pop("samples_per_s")
    timed = facts.pop("timed")
    batch = facts.pop("batch")
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"samples/s: {samples_per_s:.1f} (iterations {timed[0]}..{timed[1]})")
    print(f"max_memory_allocated: {peak}")
    print(json.dumps({"torch_train": 1, "model": args.model, "device": name, "torch": torch.__version__,
                      "small": small, "batch": batch, "iters": args.iters, "losses": losses,
                      "bits": [loss_bits(v) for v in losses], "samples_per_s": samples_per_s,
                      "max_memory_allocated": peak, "optimizer": args.optimizer, "amp": args.amp,
                      "compile": args.compile, "deterministic": deterministic,
                      "nondeterministic_ops": nondeterministic_ops, **facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
