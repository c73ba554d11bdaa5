#!/usr/bin/env python3
"""The decoder LLMs of scripts/lib/torch_models.py (meson suite 'models').

  params     llama3.2-1b, llama3.2-3b, llama3-8b and qwen2.5-7b built on meta have their
             published parameter counts (within 0.5%), embeddings tied as published;
             grouped-query attention's k and v projections have kv_heads x head_dim
             outputs; '<model>-s<seq>' sets the sequence length
  attention  the fused attention operator (Note [Fused attention op] in
             scripts/lib/torch_models.py): on the CPU its output and gradients equal
             plain attention's (causal or not, grouped or not); recorded, the forward is
             one launch keeping only out and the fp32 logsumexp beside q, k, v (k and v
             at kv_heads, never repeated), the backward one launch whose workspace is
             freed after it, FLOPs as registered; a tiny decoder's activation peak grows
             linearly with the sequence length (4x tokens, 3.5x to 4.5x the bytes: the
             s x s scores would make it grow faster)
  precision  under --precision bf16 (with and without --checkpointing) the fused
             operator gets bf16 q, k, v and keeps an fp32 logsumexp; checkpointing runs
             each forward attention again in the backward
  llama8b    llama3-8b at 4096 tokens, batch 1, AdamW records on meta within 60 s; its
             long-lived bytes are parameters, gradients and AdamW's two moments in fp32
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
LIB = REPO / "scripts" / "lib"
sys.path.insert(0, str(LIB))

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def case_params() -> None:
    from torch_models import DECODERS, Decoder, model_spec
    for name in ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen2.5-7b"):
        c, _, _, published = DECODERS[name]
        model = model_spec(name).build()
        count = sum(p.numel() for p in model.parameters())  # a tied weight counted once
        print(f"{name}: {count:,} parameters, published {published:,}")
        check(abs(count / published - 1) <= 0.005,
              f"{name}: {count} parameters, published {published} (more than 0.5% off)")
        tied = model.lm_head.weight is model.embed_tokens.weight
        check(tied == c.tied, f"{name}: embeddings tied {tied}, published {c.tied}")
        head_dim = c.hidden // c.heads
        attn = model.layers[0].self_attn
        check(c.kv_heads < c.heads, f"{name}: not grouped-query ({c.kv_heads} kv heads)")
        for proj, outputs in ((attn.q_proj, c.heads * head_dim),
                              (attn.k_proj, c.kv_heads * head_dim),
                              (attn.v_proj, c.kv_heads * head_dim)):
            check(proj.weight.shape == (outputs, c.hidden),
                  f"{name}: projection {tuple(proj.weight.shape)}, expected "
                  f"({outputs}, {c.hidden})")
            check((proj.bias is not None) == c.qkv_bias, f"{name}: q/k/v bias not as published")
        check(all(p.device.type == "meta" for p in model.parameters()),
              f"{name}: not built on meta")
        del model
    # the sequence length suffix
    spec = model_spec("llama3-8b-s4096")
    x, y = spec.inputs(1)
    check(spec.key == "llama3-8b-s4096" and tuple(x.shape) == (1, 4096)
          and tuple(y.shape) == (1, 4096), f"llama3-8b-s4096: inputs {tuple(x.shape)}")
    x, _ = model_spec("llama3-8b").inputs(1)
    check(tuple(x.shape) == (1, 2048), f"llama3-8b: default inputs {tuple(x.shape)}")
    for bad in ("llama3-8b-s", "llama3-8b-sx", "llama3-8b-s0", "gpt2-s4096", "llama9-s4096"):
        check(model_spec(bad) is None, f"model_spec({bad!r}) is not None")
    check(isinstance(Decoder(DECODERS["tiny-decoder"][0], device="cpu").lm_head.weight.sum().item(),
                     float), "tiny-decoder does not build on the CPU")


def case_attention() -> None:
    import torch
    from torch_models import _attention_reference, flash_attention, model_spec, training_step
    from torch_trace import load_device, op_flops, record_iteration
    from oversub_profile import live_bytes
    # numerics on the CPU against plain attention (autograd through the s x s scores)
    torch.manual_seed(0)
    for h, kv, causal in ((4, 2, True), (4, 4, False), (6, 1, True), (4, 4, True)):
        b, s, d = 2, 9, 8
        q, k, v = (torch.randn(b, s, n, d, dtype=torch.float64, requires_grad=True)
                   for n in (h, kv, kv))
        g = torch.randn(b, s, h, d, dtype=torch.float64)
        out = flash_attention(q, k, v, causal)
        ref = _attention_reference(q, k, v, causal)[2].transpose(1, 2)
        check(torch.allclose(out, ref, atol=1e-10), f"attention h {h} kv {kv} causal {causal}: "
              f"output differs by {(out - ref).abs().max().item()}")
        got = torch.autograd.grad(out, (q, k, v), g)
        want = torch.autograd.grad(ref, (q, k, v), g)
        for which, a, e in zip("qkv", got, want):
            check(a.shape == e.shape and torch.allclose(a, e, atol=1e-9),
                  f"attention h {h} kv {kv} causal {causal}: d{which} differs")

    # what FlashAttention-2 refuses: mixed dtypes, heads not a multiple of kv heads
    for q, k in ((torch.empty(1, 4, 4, 8, device="meta"),
                  torch.empty(1, 4, 2, 8, device="meta", dtype=torch.bfloat16)),
                 (torch.empty(1, 4, 4, 8, device="meta"), torch.empty(1, 4, 3, 8, device="meta"))):
        try:
            flash_attention(q, k, k, True)
            check(False, f"flash_attention accepted q {q.dtype} {tuple(q.shape)}, k "
                  f"{k.dtype} {tuple(k.shape)}")
        except RuntimeError:
            pass

    dev = load_device("h100-pcie")
    peaks = {}
    for seq in (256, 1024):
        spec = model_spec(f"tiny-decoder-s{seq}")
        net, step = training_step(spec, 2)
        c = net.config
        p = record_iteration(net, step, dev, "models_test")
        names = [p.strings[launch.name] for launch in p.launches]
        fwd = [i for i, n in enumerate(names) if n == "oversub.flash_attention.default"]
        bwd = [i for i, n in enumerate(names) if n == "oversub.flash_attention_backward.default"]
        check(len(fwd) == c.layers and len(bwd) == c.layers,
              f"s {seq}: {len(fwd)} forward and {len(bwd)} backward attention launches, "
              f"expected {c.layers} each")
        check(not any("bmm" in n or "softmax" in n and "log_softmax" not in n for n in names),
              f"s {seq}: attention materialised outside the fused op")
        b, hd = 2, c.hidden // c.heads

        def rounded(n: int) -> int:
            return -(-n // 512) * 512
        q_bytes = rounded(b * seq * c.heads * hd * 4)
        kv_bytes = rounded(b * seq * c.kv_heads * hd * 4)
        lse_bytes = rounded(b * c.heads * seq * 4)
        for i in fwd:
            bufs = p.launches[i].buffers
            made = sorted(p.allocations[x].bytes for x in bufs if p.allocations[x].alloc_at == i)
            check(made == sorted([q_bytes, lse_bytes]),
                  f"s {seq}: forward attention allocates {made}, expected out {q_bytes} and "
                  f"logsumexp {lse_bytes}")
            sizes = sorted(p.allocations[x].bytes for x in bufs)
            check(sizes == sorted([q_bytes, kv_bytes, kv_bytes, q_bytes, lse_bytes]),
                  f"s {seq}: forward attention buffers {sizes}: expected q, k and v at "
                  f"{c.kv_heads} kv heads, out, logsumexp")
            # kept until the backward: freed only after the matching backward launch
            check(all(p.allocations[x].free_at > min(j for j in bwd if j > i) for x in bufs
                      if p.allocations[x].alloc_at == i),
                  f"s {seq}: forward attention's out/logsumexp freed before the backward")
        for i in bwd:
            workspace = [x for x in p.launches[i].buffers if p.allocations[x].alloc_at == i
                         and p.allocations[x].free_at == i + 1]
            # softmax_d, dq_accum, dk and dv at the full head count (grouped-query)
            check(len(workspace) == 4, f"s {seq}: backward attention frees {len(workspace)} "
                  "workspace buffers after it, expected 4")
        f_args = (torch.empty(b, seq, c.heads, hd, device="meta"),
                  torch.empty(b, seq, c.kv_heads, hd, device="meta"),
                  torch.empty(b, seq, c.kv_heads, hd, device="meta"), True)
        expected = 4.0 * b * c.heads * seq * seq * hd / 2
        got = op_flops("oversub.flash_attention.default", f_args, None)
        check(got == expected, f"s {seq}: forward FLOPs {got}, expected {expected}")
        b_args = (f_args[0],) + f_args[:3] + (f_args[0], None, True)
        got = op_flops("oversub.flash_attention_backward.default", b_args, None)
        check(got == 2.5 * expected, f"s {seq}: backward FLOPs {got}, expected {2.5 * expected}")
        long_lived = sum(a.bytes for a in p.allocations if a.long_lived)
        peaks[seq] = max(live_bytes(p)) - long_lived
    ratio = peaks[1024] / peaks[256]
    print(f"tiny-decoder activation peak: {peaks[256]} B at 256 tokens, {peaks[1024]} B at "
          f"1024 ({ratio:.2f}x)")
    check(3.5 <= ratio <= 4.5, f"activation peak grows {ratio:.2f}x for 4x tokens (not linear)")


def case_precision() -> None:
    """bf16 autocast (fp32 weights) with checkpointing, as `trace-torch --precision bf16
    --checkpointing` runs it: the fused operator gets bf16 q, k, v (HF casts the
    rotary-promoted fp32 q and k back), its logsumexp stays fp32, and checkpointing
    runs each layer's forward attention again in the backward."""
    from trace_torch_cli import Options, record
    seq, b = 256, 2
    from torch_models import DECODERS
    c = DECODERS["tiny-decoder"][0]
    hd = c.hidden // c.heads
    for checkpointing in (False, True):
        p = record(f"tiny-decoder-s{seq}", b, "h100-pcie",
                   options=Options(precision="bf16", checkpointing=checkpointing))
        names = [p.strings[launch.name] for launch in p.launches]
        fwd = [i for i, n in enumerate(names) if n == "oversub.flash_attention.default"]
        bwd = [i for i, n in enumerate(names) if n == "oversub.flash_attention_backward.default"]
        what = f"bf16{' checkpointed' if checkpointing else ''}"
        check(len(fwd) == c.layers * (2 if checkpointing else 1) and len(bwd) == c.layers,
              f"{what}: {len(fwd)} forward, {len(bwd)} backward attention launches")
        expected = sorted([b * seq * c.heads * hd * 2, b * seq * c.kv_heads * hd * 2,
                           b * seq * c.kv_heads * hd * 2, b * seq * c.heads * hd * 2,
                           b * c.heads * seq * 4])
        for i in fwd:
            sizes = sorted(p.allocations[x].bytes for x in p.launches[i].buffers)
            check(sizes == expected, f"{what}: forward attention buffers {sizes}, expected "
                  f"bf16 q, k, v, out and an fp32 logsumexp {expected}")


def case_llama8b() -> None:
    from torch_models import model_spec, training_step
    from torch_trace import load_device, record_iteration
    from oversub_profile import live_bytes
    t0 = time.monotonic()
    spec = model_spec("llama3-8b-s4096")
    net, step = training_step(spec, 1)
    params = sum(p.numel() for p in net.parameters())
    p = record_iteration(net, step, load_device("h100-pcie"), "models_test")
    seconds = time.monotonic() - t0
    long_lived = sum(a.bytes for a in p.allocations if a.long_lived)
    peak = max(live_bytes(p))
    print(f"llama3-8b-s4096 batch 1: {len(p.launches)} launches, peak {peak / 1e9:.2f} GB, "
          f"long-lived {long_lived / 1e9:.2f} GB, recorded in {seconds:.1f} s")
    check(seconds < 60, f"llama3-8b-s4096: recorded in {seconds:.1f} s (over 60)")
    # fp32 parameters, gradients, exp_avg, exp_avg_sq; plus the rotary inv_freq buffer
    check(abs(long_lived / (16 * params) - 1) < 0.001,
          f"llama3-8b-s4096: long-lived {long_lived} B, expected ~16 x {params}")
    check(peak > long_lived, "llama3-8b-s4096: no activations at the peak")


def torch_python() -> str | None:
    from trace_torch_cli import torch_python as find
    return find()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=("params", "attention", "precision", "llama8b"))
    args = ap.parse_args()
    if importlib.util.find_spec("torch") is None:
        python = torch_python()
        if python is None or python == sys.executable:
            print("no Python with torch (scripts/lib/setup.sh installs python3-torch)",
                  file=sys.stderr)
            return 1
        return subprocess.run([python, __file__, *sys.argv[1:]],
                              env=dict(os.environ)).returncode
    {"params": case_params, "attention": case_attention, "precision": case_precision,
     "llama8b": case_llama8b}[args.case]()
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
