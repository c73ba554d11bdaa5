"""Any PyTorch model's training step for the recorder (`oversub trace-torch --model`).

    import torch_step
    profile = torch_step.trace_model("mymodels:build", inputs={"x": "float32[B,3,224,224]"},
                                     target="int64[B]", loss="cross-entropy",
                                     optimizer="adamw", precision="bf16", batch=32,
                                     checkpointing=True, output="/tmp/mine.oprof")

What it adds to torch_trace's recorder (docs/traces.md, "Your own model"):
  - input specs, `[NAME=]DTYPE[DIMS]` with B for the batch (parse_input);
  - the optimizers by name (make_optimizer), the losses by name (make_loss);
  - precision: bf16 / fp16 autocast emulated above autograd on meta tensors (Note
    [Autocast on meta]), fp16 with a loss scaler making GradScaler's launches
    (MetaGradScaler);
  - activation checkpointing of the model's repeated blocks (checkpoint_blocks);
  - a user's own step (`--step`), called with a StepContext.

Needs torch (1.13 or 2.x); see torch_trace.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

import torch_trace

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
LOSSES = ("cross-entropy", "mse", "sum")

class UsageError(ValueError):
    """A bad option or argument (an input spec, a MODULE:NAME, a loss without its
    target): the command prints its message, no traceback."""


# ---- inputs -------------------------------------------------------------------------

_DTYPES = {"float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
           "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float64": torch.float64, "double": torch.float64,
           "int64": torch.int64, "long": torch.int64, "int32": torch.int32,
           "int": torch.int32, "int16": torch.int16, "int8": torch.int8,
           "uint8": torch.uint8, "bool": torch.bool}
_SPEC = re.compile(r"^\s*(?:([A-Za-z_][A-Za-z_0-9]*)\s*=)?\s*([a-z0-9]+)\s*\[([^\]]*)\]\s*$")


def parse_input(spec: str, batch: int) -> tuple[str | None, torch.dtype, tuple[int, ...]]:
    """`[NAME=]DTYPE[DIM,...]` -> (name or None, dtype, shape). A DIM is an integer, B
    (the batch), or a product of those with * (`B*4`). `float32[B,3,224,224]`,
    `tokens=int64[B,1024]`, `float32[]` (a scalar)."""
    m = _SPEC.match(spec)
    if not m or m.group(2) not in _DTYPES:
        raise UsageError(f"input {spec!r}: expected [NAME=]DTYPE[DIM,...], DTYPE one of "
                         f"{', '.join(sorted(set(_DTYPES)))}, DIM an integer, B (the "
                         "batch) or a product such as B*4; e.g. x=float32[B,3,224,224]")
    shape = []
    for dim in filter(None, (d.strip() for d in m.group(3).split(","))):
        n = 1
        for factor in dim.split("*"):
            factor = factor.strip()
            if factor == "B":
                n *= batch
            elif factor.isdigit():
                n *= int(factor)
            else:
                raise UsageError(f"input {spec!r}: dimension {dim!r} is not an integer, B "
                                 "(the batch) or a product such as B*4; expected "
                                 "[NAME=]DTYPE[DIM,...], e.g. x=float32[B,3,224,224]")
        shape.append(n)
    return m.group(1), _DTYPES[m.group(2)], tuple(shape)


def _as_spec(name: str | None, value: Any) -> str:
    """A Python API input (a spec string, or (shape, dtype)) as a spec string."""
    if isinstance(value, str):
        return value if name is None or "=" in value else f"{name}={value}"
    shape, dtype = value
    dt = next(k for k, v in _DTYPES.items() if v == dtype)
    text = f"{dt}[{','.join(str(d) for d in shape)}]"
    return text if name is None else f"{name}={text}"


def _meta(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


# ---- optimizers and losses ----------------------------------------------------------

def make_optimizer(name: str, params: Any, foreach: bool = False) -> torch.optim.Optimizer:
    """sgd (lr 0.01), sgd-momentum (momentum 0.9, weight decay 1e-4), adam (lr 1e-4),
    adamw (lr 1e-4, weight decay 0.01); foreach: the multi-tensor implementation (one
    launch per operator over all parameters) instead of the per-parameter loop.
    capturable stays False, so Adam's step counts are CPU tensors as on CUDA."""
    kw = {"foreach": True} if foreach else {}
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kw)
    raise UsageError(f"optimizer {name!r}: one of {', '.join(OPTIMIZERS)}")


def first_tensor(out: Any) -> torch.Tensor:
    """The tensor a loss is taken of: out itself, the first of a tuple or list, a
    dict's or a model output's `logits` (else its first tensor)."""
    if isinstance(out, torch.Tensor):
        return out
    logits = out.get("logits") if isinstance(out, dict) else getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    values = out.values() if isinstance(out, dict) else out
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
    raise UsageError(f"the model returned {type(out).__name__} with no tensor to take a "
                    "loss of; give --loss MODULE:FUNCTION")


def cross_entropy(out: Any, target: Any) -> torch.Tensor:
    """Class scores (..., C) against int64 labels (...): one label per position."""
    x = first_tensor(out)
    if target is None:
        raise UsageError("--loss cross-entropy needs a --target (e.g. 'int64[B]')")
    if x.dim() > 2 and target.dim() == x.dim() - 1:
        return F.cross_entropy(x.reshape(-1, x.shape[-1]), target.reshape(-1))
    return F.cross_entropy(x, target)


def mse(out: Any, target: Any) -> torch.Tensor:
    return F.mse_loss(first_tensor(out), target)


def total(out: Any, target: Any) -> torch.Tensor:
    return first_tensor(out).sum()


def make_loss(name: str | Callable) -> Callable[[Any, Any], torch.Tensor]:
    """cross-entropy, mse, sum, MODULE:FUNCTION, or a callable (output, target) -> loss."""
    if callable(name):
        return name
    builtin = {"cross-entropy": cross_entropy, "mse": mse, "sum": total}.get(name)
    return builtin if builtin is not None else load_object(name, "--loss")


def load_object(ref: str, what: str = "--model") -> Any:
    """MODULE:NAME, MODULE a dotted module importable from sys.path or the current
    directory, or a path to a .py file."""
    if ":" not in ref:
        raise UsageError(f"{what} {ref!r}: expected MODULE:NAME (a module path or a .py file, "
                         "then the name in it)")
    module_ref, attr = ref.rsplit(":", 1)
    if module_ref.endswith(".py") or os.sep in module_ref:
        path = Path(module_ref).resolve()
        if not path.is_file():
            raise UsageError(f"{what} {ref!r}: no file {path}")
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_ref)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{what} {ref!r}: {module_ref} has no {attr}")
        obj = getattr(obj, part)
    return obj


def build_model(factory: Any) -> nn.Module:
    """factory (a callable, a MODULE:NAME string, or a module) built and moved to meta
    in training mode. Under torch 2.x the factory runs under torch.device("meta") (no
    weights in host memory; a factory that fails there is built on the CPU); under 1.13
    on the CPU, then moved. A factory may also build on meta itself."""
    if isinstance(factory, str):
        factory = load_object(factory, "--model")
    if isinstance(factory, nn.Module):
        model = factory
    else:
        model = None
        if hasattr(torch, "device") and hasattr(torch.device("meta"), "__enter__"):
            try:
                with torch.device("meta"):
                    model = factory()
            except Exception:
                model = None
        if model is None:
            model = factory()
        if not isinstance(model, nn.Module):
            raise UsageError(f"the factory returned {type(model).__name__}, not an nn.Module")
    model = model.to("meta")
    model.train()
    return model


# ---- autocast on meta ---------------------------------------------------------------

# Note [Autocast on meta]
# ~~~~~~~~~~~~~~~~~~~~~~~
# torch.autocast works in the dispatcher for CUDA (and CPU) tensors only, so meta
# tensors are never cast. AutocastEmulation, a TorchFunctionMode (above autograd), does
# what CUDA autocast does to the torch functions it sees: the inputs of the
# lower-precision ops (LOWER_PRECISION, CUDA autocast's float16 list) are cast to the
# autocast dtype, the 16-bit inputs of the float32 ops (FP32, its float32 list) to
# float32; any other op runs in the dtype of its inputs (type promotion makes mixed
# ones float32, as autocast's promote list does). A cast is `tensor.to(dtype)` under
# autograd, so the recorder sees it as a launch (aten._to_copy), autograd saves the
# 16-bit copies the GEMMs use, and the backward casts the gradients back to the
# parameters' float32, as on a GPU. Casts of leaf tensors that require grad (the
# weights) are cached until the outermost autocast region ends, as autocast's cast
# cache does, so a weight used twice is cast once per forward.
LOWER_PRECISION = frozenset({
    "linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm",
    "addbmm", "addmv", "addr", "mv", "chain_matmul", "multi_dot", "prelu",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "conv_tbc", "scaled_dot_product_attention",
    "_scaled_dot_product_attention"})
FP32 = frozenset({
    "softmax", "log_softmax", "softmin", "layer_norm", "group_norm", "norm", "normalize",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss", "soft_margin_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
    "multilabel_margin_loss", "multi_margin_loss", "triplet_margin_loss",
    "cosine_similarity", "cdist", "pdist", "dist", "renorm",
    "sum", "prod", "cumsum", "cumprod", "exp", "expm1", "log", "log10", "log1p", "log2",
    "pow", "__pow__", "__rpow__", "__rdiv__", "__rtruediv__", "reciprocal", "rsqrt",
    "acos", "asin", "cosh", "sinh", "tan", "erfinv", "softplus"})
_LOW = (torch.float16, torch.bfloat16)


class AutocastEmulation(TorchFunctionMode):
    """CUDA autocast to dtype (bfloat16 or float16) for meta tensors (Note [Autocast
    on meta])."""

    active: "AutocastEmulation | None" = None

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __enter__(self) -> "AutocastEmulation":
        self.outer = AutocastEmulation.active
        AutocastEmulation.active = self
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        AutocastEmulation.active = self.outer
        self.cache.clear()
        return super().__exit__(*exc)

    def _low(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.dtype == self.dtype or not x.is_floating_point() or x.dtype == torch.float64:
                return x
            if x.is_leaf and x.requires_grad:
                hit = self.cache.get(id(x))
                if hit is None or hit[0] is not x:
                    hit = (x, x.to(self.dtype))
                    self.cache[id(x)] = hit
                return hit[1]
            return x.to(self.dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(self._low(v) for v in x)
        return x

    def _fp32(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.to(torch.float32) if x.dtype in _LOW else x
        if isinstance(x, (list, tuple)):
            return type(x)(self._fp32(v) for v in x)
        return x

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", None)
        if name in LOWER_PRECISION:
            args = self._low(args)
            kwargs = {k: self._low(v) for k, v in kwargs.items()}
        elif name in FP32:
            args = self._fp32(args)
            kwargs = {k: self._fp32(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def autocast(precision: str) -> Any:
    """The autocast region of a step at precision fp32 (nothing), bf16 or fp16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return AutocastEmulation(torch.bfloat16 if precision == "bf16" else torch.float16)


# ---- loss scaling -------------------------------------------------------------------

class NoScaler:
    """GradScaler's interface doing nothing (fp32 and bf16)."""

    def scale(self, loss: Any) -> Any:
        return loss

    def unscale_(self, optimizer: Any) -> None:
        pass

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        pass


class MetaGradScaler(NoScaler):
    """torch.cuda.amp.GradScaler's launches on meta tensors (its CUDA checks refuse
    them): the same operators in the same order as its 1.13 code, so the recorder sees
    what a GPU runs. scale: `loss * scale` (the scale and growth tracker are made at
    the first call, long-lived after). unscale_: the inverse scale (in float64, as
    GradScaler computes it), a found_inf flag, both copied per device, and one
    _amp_foreach_non_finite_check_and_unscale_ over the gradients of each dtype,
    writing them and found_inf. step: optimizer.step() (GradScaler first reads found_inf
    on the host, a 4-byte device-to-host read not recorded; meta has no values, so the
    step is never skipped). update: _amp_update_scale_ writing the scale and tracker."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        self.init_scale, self.growth_factor = init_scale, growth_factor
        self.backoff_factor, self.growth_interval = backoff_factor, growth_interval
        self._scale: Any = None
        self._growth_tracker: Any = None
        self._found: list[Any] = []
        self._unscaled: set[int] = set()

    def scale(self, loss: Any) -> Any:
        if self._scale is None:
            self._scale = torch.full((1,), self.init_scale, dtype=torch.float32,
                                     device=loss.device)
            self._growth_tracker = torch.full((1,), 0, dtype=torch.int32, device=loss.device)
        return loss * self._scale.to(device=loss.device, non_blocking=True)

    def unscale_(self, optimizer: Any) -> None:
        if id(optimizer) in self._unscaled:
            return
        self._unscaled.add(id(optimizer))
        inv_scale = self._scale.double().reciprocal().float()
        found_inf = torch.full((1,), 0.0, dtype=torch.float32, device=self._scale.device)
        groups: dict[Any, dict[Any, list]] = {}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        g = param.grad
                        groups.setdefault(g.device, {}).setdefault(g.dtype, []).append(g)
            for device, per_dtype in groups.items():
                dev_found = found_inf.to(device=device, non_blocking=True, copy=True)
                dev_inv = inv_scale.to(device=device, non_blocking=True, copy=True)
                for grads in per_dtype.values():
                    torch._amp_foreach_non_finite_check_and_unscale_(grads, dev_found, dev_inv)
                self._found.append(dev_found)

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        self.unscale_(optimizer)
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        found = self._found[0]
        for other in self._found[1:]:
            found += other
        torch._amp_update_scale_(self._scale, self._growth_tracker, found,
                                 self.growth_factor, self.backoff_factor, self.growth_interval)
        self._found = []
        self._unscaled = set()


# ---- activation checkpointing -------------------------------------------------------

def repeated_blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """The model's largest run of repeated blocks: of its nn.ModuleList and
    nn.Sequential containers, the one with the most children of one class (ties: the
    most parameters), and those children. ("", []) when no container repeats a class."""
    best: tuple[int, int, str, list[nn.Module]] = (1, 0, "", [])
    for path, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(m.children())
        if not children:
            continue
        cls, count = Counter(type(c) for c in children).most_common(1)[0]
        blocks = [c for c in children if type(c) is cls]
        params = sum(p.numel() for c in blocks for p in c.parameters())
        if (count, params) > best[:2]:
            best = (count, params, path, blocks)
    return best[2], best[3]


def checkpoint_blocks(model: nn.Module) -> tuple[str, int]:
    """Wraps the forward of each of the model's repeated blocks (repeated_blocks) in
    torch.utils.checkpoint.checkpoint(use_reentrant=False, preserve_rng_state=False):
    the forward keeps only each block's inputs, the backward recomputes the block. The
    recomputation runs under the autocast emulation the forward ran under. Returns the
    container's path and the number of blocks wrapped."""
    from torch.utils.checkpoint import checkpoint
    path, blocks = repeated_blocks(model)
    if not blocks:
        raise UsageError("--checkpointing: the model has no nn.ModuleList or nn.Sequential "
                         "of two or more blocks of one class to checkpoint")
    for block in blocks:
        if getattr(block, "_oversub_checkpointed", False):
            continue  # wrapped by an earlier trace of the same module
        block._oversub_checkpointed = True
        forward = block.forward

        def checkpointed(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            region = AutocastEmulation.active
            dtype = region.dtype if region is not None else None

            def run(*a: Any, **k: Any) -> Any:
                if dtype is None or AutocastEmulation.active is not None:
                    return _forward(*a, **k)
                with AutocastEmulation(dtype):  # the recomputation, in the backward
                    return _forward(*a, **k)
            return checkpoint(run, *args, use_reentrant=False, preserve_rng_state=False,
                              **kwargs)
        block.forward = checkpointed
    return path or type(model).__name__, len(blocks)


# ---- the step -----------------------------------------------------------------------

class StepContext:
    """What a step function gets (`--step MODULE:FUNCTION`, trace_model(step=...)).

    Attributes: model (on meta, training mode), batch (int), inputs (the positional
    input tensors, on meta, already copied in), named (the NAME= inputs by name),
    target (the --target tensor or None), optimizer (or None for optimizer=None),
    precision ("fp32", "bf16", "fp16"), scaler (MetaGradScaler for fp16, else a
    NoScaler: scale(loss), step(optimizer), update() are always safe to call), loss_fn
    (output, target) -> loss.
    Methods: autocast() (the precision's autocast region: use it around the forward
    and the loss), copy_in(tensor) (record a host-to-device copy into a tensor the step
    makes itself), new_input(spec) (a fresh input from a spec, copied in)."""

    def __init__(self, model: nn.Module, batch: int, optimizer: Any, precision: str,
                 loss_fn: Callable, specs: list[str], target_spec: str | None) -> None:
        self.model, self.batch, self.optimizer = model, batch, optimizer
        self.precision, self.loss_fn = precision, loss_fn
        self.scaler = MetaGradScaler() if precision == "fp16" else NoScaler()
        self.specs, self.target_spec = specs, target_spec
        self.rec: Any = None
        self.inputs: list[torch.Tensor] = []
        self.named: dict[str, torch.Tensor] = {}
        self.target: Any = None

    def autocast(self) -> Any:
        return autocast(self.precision)

    def copy_in(self, t: Any) -> None:
        if self.rec is not None:
            self.rec.copy_in(t)

    def new_input(self, spec: str) -> torch.Tensor:
        _, dtype, shape = parse_input(spec, self.batch)
        t = _meta(dtype, shape)
        self.copy_in(t)
        return t

    def _make_batch(self) -> None:
        self.inputs, self.named = [], {}
        if callable(self.specs):  # a built-in model's batch: (input, target)
            x, self.target = self.specs(self.batch)
            self.copy_in(x)
            self.copy_in(self.target)
            self.inputs = [x]
            return
        for spec in self.specs:
            name, dtype, shape = parse_input(spec, self.batch)
            t = _meta(dtype, shape)
            self.copy_in(t)
            if name is None:
                self.inputs.append(t)
            else:
                self.named[name] = t
        self.target = self.new_input(self.target_spec) if self.target_spec else None

    def forward(self) -> Any:
        return self.model(*self.inputs, **self.named)


def default_step(ctx: StepContext) -> None:
    """zero_grad (kept, zeroed: 1.13's default), the batch (ctx._make_batch: copied in),
    forward and loss under the
    precision's autocast, backward of the (scaled) loss, the (scaler's) optimizer
    step."""
    if ctx.optimizer is not None:
        ctx.optimizer.zero_grad(set_to_none=False)
    ctx._make_batch()
    with ctx.autocast():
        out = ctx.forward()
        loss = ctx.loss_fn(out, ctx.target)
    del out
    ctx.scaler.scale(loss).backward()
    if ctx.optimizer is not None:
        ctx.scaler.step(ctx.optimizer)
        ctx.scaler.update()


def prepare(model: Any, inputs: Any, target: str | tuple | None = None,
            loss: str | Callable = "cross-entropy", optimizer: Any = "adamw",
            foreach: bool = False, precision: str = "fp32", checkpointing: bool = False,
            batch: int = 1, step: Any = None) -> tuple[nn.Module, Callable, str]:
    """The model on meta and the step the recorder runs: (model, step(rec), what was
    set up, for the profile's program line)."""
    if precision not in PRECISIONS:
        raise UsageError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    net = build_model(model)
    what = [f"precision {precision}"]
    if checkpointing:
        path, n = checkpoint_blocks(net)
        what.append(f"checkpointing {n} blocks of {path}")
    if isinstance(optimizer, str):
        opt = make_optimizer(optimizer, net.parameters(), foreach)
        what.append(optimizer + (" foreach" if foreach else ""))
    elif callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        opt = optimizer(net.parameters())
        what.append(type(opt).__name__)
    else:
        opt = optimizer
        what.append(type(opt).__name__ if opt is not None else "no optimizer")
    if callable(inputs):
        specs: Any = inputs  # batch -> (input, target), as torch_models' ModelSpec.inputs
    elif isinstance(inputs, dict):
        specs = [_as_spec(k, v) for k, v in inputs.items()]
    elif isinstance(inputs, str):
        specs = [inputs]
    else:
        specs = [_as_spec(None, v) for v in inputs]
    for s in ([] if callable(specs) else specs):
        parse_input(s, batch)  # refuse a bad spec before recording
    target_spec = _as_spec(None, target) if target is not None else None
    if target_spec is not None:
        parse_input(target_spec, batch)
    loss_fn = make_loss(loss)
    if isinstance(loss, str):
        what.append(f"loss {loss}")
    ctx = StepContext(net, batch, opt, precision, loss_fn, specs, target_spec)
    user = load_object(step, "--step") if isinstance(step, str) else step
    body = user or default_step
    if user is not None:
        what.append(f"step {step if isinstance(step, str) else getattr(step, '__name__', 'step')}")

    def run(rec: Any) -> None:
        ctx.rec = rec
        if body is not default_step:
            ctx._make_batch()  # the default step makes it after zero_grad
        body(ctx)
        ctx.inputs, ctx.named, ctx.target = [], {}, None

    return net, run, ", ".join(what)


def trace_model(model: Any, inputs: Any = (), target: Any = None,
                loss: str | Callable = "cross-entropy", optimizer: Any = "adamw",
                foreach: bool = False, precision: str = "fp32", checkpointing: bool = False,
                batch: int = 1, step: Any = None, device: str = "h100-pcie",
                output: str | Path | None = None, program: str | None = None) -> Any:
    """Records one training iteration of any model and returns the Profile (oprof),
    written to output when given (.oprof, or .oprof.gz).

    model: an nn.Module, a factory returning one, or "MODULE:FACTORY"; it is moved to
        meta (its weights are not used). A module passed itself is moved in place and
        keeps the recorded state (meta gradients, checkpointed blocks): pass a factory
        or a copy to keep its weights. inputs: the model's inputs, positional as a
        list of specs ("float32[B,3,224,224]") or (shape, dtype) pairs, by keyword as a
        dict {name: spec}; B is the batch; or a function batch -> (input, target) of
        meta tensors. target: the loss's target spec (or None).
    loss: "cross-entropy", "mse", "sum", "MODULE:FUNCTION" or a callable (output,
        target) -> loss tensor. optimizer: "sgd", "sgd-momentum", "adam", "adamw", a
        callable params -> optimizer, or None; foreach: its multi-tensor implementation.
    precision: "fp32", "bf16" (bf16 autocast, fp32 weights and gradients), "fp16" (fp16
        autocast with a loss scaler). checkpointing: checkpoint each repeated block.
    step: a function step(ctx: StepContext) replacing default_step (the whole
        iteration: zero_grad, forward, loss, backward, optimizer); "MODULE:FUNCTION"
        too. device: a device model name (durations, capacity, link)."""
    import oprof
    net, run, what = prepare(model, inputs, target, loss, optimizer, foreach, precision,
                             checkpointing, batch, step)
    dev = torch_trace.load_device(device)
    if program is None:
        name = model if isinstance(model, str) else getattr(model, "__name__",
                                                            type(model).__name__)
        program = (f"torch_step.trace_model({name}), batch {batch}, {what}; torch "
                   f"{torch.__version__} on meta; durations modeled on {dev.name}")
    profile = torch_trace.record_iteration(net, run, dev, program)
    if output is not None:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        oprof.write_profile(Path(output), profile)
    return profile
