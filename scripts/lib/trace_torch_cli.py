"""`oversub trace-torch`: record a model's training iteration as a profile (.oprof).

  oversub trace-torch vgg16 --batch 256 -o traces/vgg16-b256.oprof [--device h100-pcie]
  oversub trace-torch gpt2 --precision bf16 --checkpointing --optimizer adamw --foreach
  oversub trace-torch --model mymodels.py:build --input 'x=float32[B,3,224,224]' \
      --target 'int64[B]' --loss cross-entropy --batch 64 -o /tmp/mine.oprof
  oversub trace-torch --model mymodels:build --input 'int64[B,512]' --step mysteps:train \
      --batch 8 -o /tmp/mine.oprof     your own step: see torch_step.StepContext
  oversub trace-torch --all            the shipped traces under traces/ (shipped() below)
  oversub trace-torch --check          records each model at its published figure's
                                       configuration and prints the peak table of
                                       docs/traces.md; exit 1 if a ratio is outside
                                       [0.75, 1.25]

Runs under a Python that has torch (Debian's python3-torch: /usr/bin/python3);
scripts/oversub re-runs this file there when its own Python lacks torch.
docs/traces.md says what is recorded and what is approximated.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oprof import Profile, write_profile  # noqa: E402
from oversub_profile import fmt_bytes, live_bytes  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
TRACE_DIR = REPO / "traces"
DEFAULT_DEVICE = "h100-pcie"
BAND = 0.25  # |ours / published - 1| allowed by issue 8

# The shipped traces: (model, batch, device). Durations are modeled on the device.
TRACES: list[tuple[str, int, str]] = [
    ("vgg16", 64, "h100-pcie"), ("vgg16", 256, "h100-pcie"),
    ("resnet50", 32, "h100-pcie"), ("resnet50", 128, "h100-pcie"),
    ("resnet152", 32, "h100-pcie"), ("resnet152", 128, "h100-pcie"),
    ("gpt2", 8, "h100-pcie"), ("bert-large", 32, "h100-pcie"),
    # the papers' own GPUs, for replaying their tables (vDNN: Titan X)
    ("vgg16", 256, "titanx-maxwell"), ("resnet152", 32, "titanx-maxwell"),
]
# Today's LLM fine-tuning: decoders in bf16 autocast (fp32 master weights) with AdamW,
# 2048 tokens, as written by --all: llama3.2-1b-b4-bf16.oprof, llama3-8b-b1-bf16.oprof.
LLM_TRACES: list[tuple[str, int, str, str]] = [
    ("llama3.2-1b", 4, "h100-pcie", "bf16"), ("llama3-8b", 1, "h100-pcie", "bf16"),
]


@dataclass
class Published:
    """A peak-memory figure someone measured or stated for a model's training."""
    model: str
    batch: int
    bytes: int
    what: str      # the figure as stated, and what it counts
    source: str    # where it is published
    # What the figure counts (Note [Comparing like with like] in docs/traces.md):
    #   "nvidia-smi"    everything the process holds: CUDA context and kernels plus the
    #                   allocator's reserved bytes;
    #   "network-wide"  vDNN's baseline: every layer's outputs and their gradients
    #                   allocated for the whole iteration, plus weights;
    #   "saved"         the activations the forward pass keeps for the backward pass:
    #                   per-iteration bytes live just after the loss.
    measures: str = "nvidia-smi"
    bytes_high: int | None = None   # the top of a published range ("10-13GB")


GB, MiB = 10**9, 1 << 20
# CUDA context, loaded kernels and library handles, as nvidia-smi counts them before the
# first tensor: 1343 MiB, measured by the HF "Model training anatomy" page (V100, PyTorch,
# all kernels loaded at start-up as before CUDA 11.7's lazy loading). The only published
# figure we found that includes a framework's kernels and cuDNN/cuBLAS; used for every
# nvidia-smi row (docs/traces.md says how far it is from each row's GPU and framework).
CUDA_CONTEXT_BYTES = 1343 * MiB
HF_ANATOMY = ("HF transformers docs, \"Model training anatomy\" "
              "(huggingface.co/docs/transformers/model_memory_anatomy): nvidia-smi on a V100")
MXNET_TABLE = ("knjcode/mxnet-finetuner docs/benchmark.md, \"Memory usage (MiB)\": MXNet, SGD, "
               "Maxwell Titan X, nvidia-smi")


def transformer_activation_bytes(s: int, b: int, h: int, a: int, layers: int, vocab: int,
                                 elem: int = 2) -> int:
    """Korthikanti et al. (MLSys 2023, arXiv 2205.05198), section 4: the activations a
    GPT-style transformer stores for the backward pass, without parallelism or
    recomputation. Per layer, with elem-byte activations and 1-byte dropout masks:
    attention 5*elem*sbh + sbh (QKV input, Q, K, V, output projection input; its
    dropout mask) plus (2*elem + 1)*as^2b (softmax output, its dropout mask and output);
    MLP 9*elem*sbh + sbh (first linear input, GeLU input at 4h, second linear input at
    4h; dropout mask); two layer norms' inputs 2*elem*sbh. With elem = 2 (the paper's
    16-bit activations) this is their equation sbh(34 + 5as/h). Outside the layers
    (their section 4.3): the embedding dropout mask sbh, the final layer norm's and the
    output projection's inputs 2*elem*sbh, and the logits, kept in 32 bits, 4sbv."""
    sbh, as2b = s * b * h, a * s * s * b
    layer = (5 * elem + 1) * sbh + (2 * elem + 1) * as2b + (9 * elem + 1) * sbh + 2 * elem * sbh
    return layers * layer + sbh + 2 * elem * sbh + 4 * s * b * vocab


# GPT-2 small (Radford et al. 2019: 12 layers, d 768, 12 heads, 1024 tokens, vocabulary
# 50257) at batch 8, the trace's fp32: every activation term at 4 bytes.
GPT2_SAVED = transformer_activation_bytes(1024, 8, 768, 12, 12, 50257, elem=4)

PUBLISHED: list[Published] = [
    Published("vgg16", 256, 28 * GB,
              "28 GB (feature maps, weights, workspace; network-wide allocation, no reuse)",
              "Rhu et al., vDNN, MICRO 2016, abstract",
              measures="network-wide"),
    Published("resnet50-256", 96, 10 * GB,
              "\"10-13GB\" (256x256 images, PyTorch; the post does not say how it was measured: "
              "taken as nvidia-smi)",
              "discuss.pytorch.org/t/117402 \"ResNet-50 takes 10-13GB to run with batch size "
              "of 96\", as quoted in github.com/PatrickHua/SimSiam/issues/51",
              bytes_high=13 * GB),
    Published("gpt2", 8, GPT2_SAVED,
              f"{GPT2_SAVED / GB:.2f} GB of activations kept for the backward pass: the paper's "
              "formula, sbh(34 + 5as/h) per layer plus embeddings and fp32 logits, evaluated "
              "at s 1024, b 8, h 768, a 12, 12 layers, v 50257, with the 16-bit terms at 4 bytes "
              f"(fp32, as traced; {transformer_activation_bytes(1024, 8, 768, 12, 12, 50257) / GB:.2f}"
              " GB as published, 16-bit)",
              "Korthikanti et al., \"Reducing Activation Recomputation in Large Transformer "
              "Models\", MLSys 2023 (arXiv 2205.05198), section 4", measures="saved"),
    Published("bert-large-cls", 4, 14949 * MiB,
              "14949 MiB occupied in training (of which 1343 MiB CUDA context and kernels, "
              "measured on the same page)", HF_ANATOMY),
] + [Published(model, batch, mib * MiB, f"{mib} MiB (all the process holds)", MXNET_TABLE)
     for model, figures in (("vgg16", (1738, 2960, 4751, 5977)),
                            ("resnet50", (1875, 3080, 4265, 5483)),
                            ("resnet152", (3790, 6296, 8777, 11330)))
     for batch, mib in zip((10, 20, 30, 40), figures)]


def trace_path(model: str, batch: int, device: str) -> Path:
    suffix = "" if device == DEFAULT_DEVICE else f"-{device}"
    return TRACE_DIR / f"{model}-b{batch}{suffix}.oprof"


def shipped() -> list[tuple[str, int, str, "Options", Path]]:
    """Every shipped trace (TRACES, then LLM_TRACES): model, batch, device, the run's
    options and its path under traces/, as --all writes them."""
    out = [(m, b, d, Options(), trace_path(m, b, d)) for m, b, d in TRACES]
    for m, b, d, precision in LLM_TRACES:
        options = Options(precision=precision)
        path = trace_path(m, b, d)
        out.append((m, b, d, options, path.with_name(
            path.name.replace(".oprof", options.suffix() + ".oprof"))))
    return out


@dataclass
class Options:
    """How the step is run (defaults: the built-in model's own optimizer, fp32, no
    checkpointing)."""
    optimizer: str | None = None
    foreach: bool = False
    precision: str = "fp32"
    checkpointing: bool = False

    def default(self) -> bool:
        return self == Options()

    def suffix(self) -> str:
        """What a non-default run adds to the default trace name: -adam-foreach-bf16-ckpt."""
        parts = [self.optimizer or ""] + ["foreach"] * self.foreach
        parts += [self.precision] * (self.precision != "fp32") + ["ckpt"] * self.checkpointing
        return "".join(f"-{p}" for p in parts if p)


def record(model: str, batch: int, device: str,
           allocation_trace_out: list[str] | None = None,
           options: Options | None = None) -> Profile:
    import torch
    from torch_models import model_spec, training_step
    from torch_trace import load_device, record_iteration
    spec = model_spec(model)
    assert spec is not None, model
    dev = load_device(device)
    options = options or Options()
    if options.default():
        net, step = training_step(spec, batch)
        what = "fp32"
    else:
        import torch_step
        net, step, what = torch_step.prepare(
            spec.build, spec.inputs, loss=spec.loss,
            optimizer=options.optimizer or spec.optimizer, foreach=options.foreach,
            precision=options.precision, checkpointing=options.checkpointing, batch=batch)
    flags = "".join(f" --{k} {v}" for k, v in (("optimizer", options.optimizer),
                                               ("precision", options.precision))
                    if v and v != "fp32")
    flags += " --foreach" * options.foreach + " --checkpointing" * options.checkpointing
    program = (f"oversub trace-torch {model} --batch {batch} --device {device}{flags}: "
               f"{spec.title}, batch {batch}, {what}; torch {torch.__version__} on meta; "
               f"durations modeled on {dev.name}")
    return record_iteration(net, step, dev, program, allocation_trace_out)


def record_custom(args: argparse.Namespace) -> Profile:
    """--model MODULE:FACTORY (with --input/--target/--loss or --step)."""
    import torch
    import torch_step
    from torch_trace import load_device, record_iteration
    batch = args.batch or 1
    net, step, what = torch_step.prepare(
        args.custom_model, args.input or [], target=args.target, loss=args.loss,
        optimizer=args.optimizer or "adamw", foreach=args.foreach, precision=args.precision,
        checkpointing=args.checkpointing, batch=batch, step=args.step)
    dev = load_device(args.device)
    program = (f"oversub trace-torch --model {args.custom_model} "
               + "".join(f"--input {i} " for i in args.input or [])
               + (f"--target {args.target} " if args.target else "")
               + f"--batch {batch}: {what}; torch {torch.__version__} on meta; durations "
               f"modeled on {dev.name}")
    return record_iteration(net, step, dev, program)


def peak(p: Profile) -> int:
    return max(live_bytes(p), default=0)


def describe(path: Path, p: Profile, seconds: float) -> str:
    ll = sum(a.bytes for a in p.allocations if a.long_lived)
    shown = path.resolve()
    shown = shown.relative_to(REPO) if shown.is_relative_to(REPO) else shown
    return (f"{shown}: {len(p.launches)} launches, {len(p.allocations)} buffers, peak "
            f"{fmt_bytes(peak(p))} (long-lived {fmt_bytes(ll)}), modeled kernel time "
            f"{p.iteration_kernel_ns / 1e6:.1f} ms, {path.stat().st_size // 1024} KiB, "
            f"{seconds:.1f} s")


def write(model: str, batch: int, device: str, out: Path,
          options: Options | None = None) -> int:
    t0 = time.monotonic()
    p = record(model, batch, device, options=options)
    return save(p, out, t0)


def save(p: Profile, out: Path, t0: float) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_profile(out, p)
    print(describe(out, p, time.monotonic() - t0))
    return 0


def pooling_indices(p: Profile) -> set[int]:
    """The int64 index tensors PyTorch's max pooling saves for its backward: of the two
    buffers a `max_pool2d_with_indices` launch allocates, the one of twice the other's
    bytes (8-byte indices beside 4-byte values)."""
    out = set()
    for i, launch in enumerate(p.launches):
        name = p.strings[launch.name]
        if "max_pool2d_with_indices" not in name or "backward" in name:
            continue
        made = [b for b in launch.buffers if p.allocations[b].alloc_at == i]
        if len(made) == 2:
            small, large = sorted(made, key=lambda b: p.allocations[b].bytes)
            if p.allocations[large].bytes == 2 * p.allocations[small].bytes:
                out.add(large)
    return out


def loss_launch(p: Profile) -> int:
    """The position of the loss's forward launch (the last one, for a model with several)."""
    return max(i for i, launch in enumerate(p.launches) if "loss_forward" in p.strings[launch.name])


def network_wide(p: Profile) -> int:
    """vDNN's baseline (network-wide allocation, no reuse): the long-lived buffers plus
    every buffer the forward pass allocates (up to the loss) counted twice, once for the
    output and once for its gradient, all held for the whole iteration. vDNN ran on
    cuDNN, whose pooling backward takes the layer's input, output and output gradient
    and keeps no index tensor (cudnnPoolingBackward), so PyTorch's max-pooling indices
    are left out (Note [Comparing like with like] in docs/traces.md)."""
    loss = loss_launch(p)
    indices = pooling_indices(p)
    forward = sum(a.bytes for k, a in enumerate(p.allocations)
                  if not a.long_lived and a.alloc_at <= loss and k not in indices)
    return sum(a.bytes for a in p.allocations if a.long_lived) + 2 * forward


def saved_activations(p: Profile) -> int:
    """The activations the forward pass keeps for the backward pass: the per-iteration
    bytes live just after the loss's forward launch (Note [Comparing like with like] in docs/traces.md)."""
    loss = loss_launch(p)
    return sum(a.bytes for a in p.allocations
               if not a.long_lived and a.alloc_at <= loss
               and (a.free_at is None or a.free_at > loss + 1))


def find_fragmentation_bench(build: Path | None) -> Path | None:
    """tests/bench/fragmentation/fragmentation_bench of build, else of the newest build*."""
    rel = Path("tests/bench/fragmentation/fragmentation_bench")
    if build is not None:
        return build / rel if (build / rel).is_file() else None
    found = [b / rel for b in REPO.glob("build*") if (b / rel).is_file()]
    return max(found, key=lambda f: f.stat().st_mtime) if found else None


def caching_reserved(bench: Path, traces: list[Path]) -> dict[str, int]:
    """The PyTorch-style caching allocator model's peak reserved bytes (segments never
    released) for each allocation trace, by name (Note [Baseline caching allocator] in
    tests/bench/fragmentation/caching_allocator_model.cc)."""
    r = subprocess.run([str(bench), "--caching-only", *map(str, traces)], capture_output=True,
                       text=True, check=True)
    out = {}
    for line in r.stdout.splitlines():
        name, _lower, reserved, _emptied = line.split()
        out[name] = int(reserved)
    return out


def check(build: Path | None = None) -> int:
    """The peak table of docs/traces.md, recomputed (Note [Comparing like with like] in docs/traces.md)."""
    import tempfile
    bench = find_fragmentation_bench(build)
    if bench is None:
        print("trace-torch --check: no build*/tests/bench/fragmentation/fragmentation_bench "
              "(the caching allocator model); build it or pass --build", file=sys.stderr)
        return 2
    records = []
    with tempfile.TemporaryDirectory(prefix="trace-torch-check-") as tmp:
        paths = []
        for k, pub in enumerate(PUBLISHED):
            lines: list[str] = []
            p = record(pub.model, pub.batch, DEFAULT_DEVICE, lines)
            path = Path(tmp) / f"row{k}.trace"
            path.write_text("\n".join(lines) + "\n")
            paths.append(path)
            records.append(p)
        reserved = caching_reserved(bench, paths)
    rows = [f"| model | batch | tensor peak | reserved (model) | modeled as published | "
            f"published | ratio, tensors | ratio, modeled | within {BAND:.0%} | "
            "what was published | source |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    bad = 0
    for k, (pub, p) in enumerate(zip(PUBLISHED, records)):
        tensors = peak(p)
        res = reserved[f"row{k}"]
        if pub.measures == "network-wide":
            modeled, how = network_wide(p), "network-wide"
        elif pub.measures == "saved":
            modeled, how = saved_activations(p), "kept for backward"
        else:
            modeled, how = res + CUDA_CONTEXT_BYTES, "reserved + context"
        high = pub.bytes_high or pub.bytes

        def ratio(x: int) -> float:
            return x / pub.bytes if x < pub.bytes else (x / high if x > high else 1.0)
        ok = abs(ratio(modeled) - 1) <= BAND
        bad += not ok
        shown = f"{pub.bytes / GB:.2f} GB" + (f"-{high / GB:.2f} GB" if high != pub.bytes else "")
        rows.append(f"| {pub.model} | {pub.batch} | {tensors / GB:.2f} GB | {res / GB:.2f} GB | "
                    f"{modeled / GB:.2f} GB ({how}) | {shown} | {ratio(tensors):.2f} | "
                    f"{ratio(modeled):.2f} | {'yes' if ok else 'NO'} | {pub.what} | "
                    f"{pub.source} |")
    print("\n".join(rows))
    print(f"\ncontext: {CUDA_CONTEXT_BYTES / MiB:.0f} MiB (HF anatomy page, V100); reserved: "
          f"{bench.relative_to(REPO) if bench.is_relative_to(REPO) else bench} --caching-only")
    return 1 if bad else 0


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options, shared with scripts/oversub's trace-torch subparser."""
    ap.add_argument("model", nargs="?", help="vgg16, resnet50, resnet152, gpt2, bert-large, "
                                             "bert-large-cls, resnet50-256, tiny-cnn, tiny-mlp, "
                                             "or resnet<depth> (e.g. resnet1001)")
    ap.add_argument("--batch", type=int, help="batch size (default: the model's)")
    ap.add_argument("--device", default=DEFAULT_DEVICE,
                    help="device model for durations, capacity and link figures: a "
                         "tests/simgpu/devices/*.model name (default %(default)s)")
    ap.add_argument("-o", "--output", type=Path, metavar="PATH",
                    help="profile to write (.oprof, or .oprof.gz compressed); default "
                         "traces/<model>-b<batch>[-<device>].oprof")
    ap.add_argument("--all", action="store_true", help="write every shipped trace")
    ap.add_argument("--check", action="store_true",
                    help="print the published-figure table; exit 1 outside the band")
    ap.add_argument("--build", type=Path,
                    help="--check: meson build folder with the fragmentation benchmark "
                         "(default: the newest build*)")
    g = ap.add_argument_group("how the step runs (any model)")
    g.add_argument("--optimizer", choices=("sgd", "sgd-momentum", "adam", "adamw"),
                   help="default: the built-in model's own (SGD momentum for CNNs, AdamW "
                        "for transformers), adamw for --model")
    g.add_argument("--foreach", action="store_true",
                   help="the optimizer's multi-tensor (foreach) implementation")
    g.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="bf16: bf16 autocast, fp32 weights and gradients; fp16: fp16 "
                        "autocast with a loss scaler (GradScaler); default %(default)s")
    g.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing of each block of the model's largest "
                        "nn.ModuleList / nn.Sequential of repeated blocks")
    g = ap.add_argument_group("your own model (docs/traces.md, \"Your own model\")")
    g.add_argument("--model", dest="custom_model", metavar="MODULE:FACTORY",
                   help="a function returning an nn.Module: MODULE a module importable "
                        "from the current directory or sys.path, or a .py file")
    g.add_argument("--input", action="append", metavar="[NAME=]DTYPE[DIMS]",
                   help="one model input, e.g. 'x=float32[B,3,224,224]' (B: the batch; "
                        "NAME= passes it by keyword); repeat for several")
    g.add_argument("--target", metavar="DTYPE[DIMS]",
                   help="the loss's target, e.g. 'int64[B]'")
    g.add_argument("--loss", default="cross-entropy", metavar="LOSS",
                   help="cross-entropy, mse, sum, or MODULE:FUNCTION (output, target) -> "
                        "loss; default %(default)s")
    g.add_argument("--step", metavar="MODULE:FUNCTION",
                   help="your whole training step, FUNCTION(ctx) with ctx a "
                        "torch_step.StepContext (replaces the default step)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="oversub trace-torch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    args = ap.parse_args(argv)
    if args.check:
        return check(args.build)
    if args.all:
        for model, batch, device, options, path in shipped():
            write(model, batch, device, path, options)
        return 0
    options = Options(args.optimizer, args.foreach, args.precision, args.checkpointing)
    if args.custom_model:
        if args.model:
            ap.error("give a built-in model or --model MODULE:FACTORY, not both")
        if not args.output:
            ap.error("--model needs -o PATH")
        from torch_step import UsageError
        from torch_trace import RecordError
        t0 = time.monotonic()
        try:
            p = record_custom(args)
        except (RecordError, UsageError, ModuleNotFoundError) as e:
            print(f"oversub trace-torch: {e}", file=sys.stderr)
            return 1
        return save(p, args.output, t0)
    if args.input or args.target or args.step:
        ap.error("--input, --target and --step go with --model MODULE:FACTORY")
    from torch_models import MODELS, model_spec
    spec = model_spec(args.model) if args.model else None
    if spec is None:
        ap.error(f"model: one of {', '.join(MODELS)}, or resnet<depth> with depth = 3 x "
                 "blocks + 2 >= 50 (or --all, --check)")
    batch = args.batch or spec.default_batch
    out = args.output or trace_path(args.model, batch, args.device)
    if not args.output and not options.default():
        out = out.with_name(out.name.replace(".oprof", options.suffix() + ".oprof"))
    from torch_trace import RecordError
    try:
        return write(args.model, batch, args.device, out, options)
    except RecordError as e:
        print(f"oversub trace-torch: {e}", file=sys.stderr)
        return 1


def torch_python() -> str | None:
    """A Python that imports torch: this one, $OVERSUB_TORCH_PYTHON, or Debian's."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    for candidate in (os.environ.get("OVERSUB_TORCH_PYTHON"), "/usr/bin/python3"):
        if candidate and Path(candidate).is_file() and subprocess.run(
                [candidate, "-c", "import torch, torchvision"],
                capture_output=True).returncode == 0:
            return candidate
    return None


def run_with_torch(argv: list[str]) -> int:
    """main(argv) under a Python that has torch (scripts/oversub's entry point)."""
    python = torch_python()
    if python is None:
        print("oversub trace-torch: no Python with torch and torchvision found; install "
              "Debian's python3-torch python3-torchvision (or set OVERSUB_TORCH_PYTHON)",
              file=sys.stderr)
        return 2
    if python == sys.executable:
        return main(argv)
    return subprocess.run([python, str(Path(__file__).resolve()), *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
