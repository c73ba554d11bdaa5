"""Record one PyTorch training iteration, on the CPU, as an oversub profile.

    from torch_trace import record_iteration, load_device
    profile = record_iteration(model, step, device=load_device("h100-pcie"), program="...")

How it records (Note [Recording on meta] in docs/traces.md):
  - every tensor lives on PyTorch's `meta` device: shapes, dtypes and storages, no
    memory and no arithmetic, so VGG-16 at batch 256 records in seconds on a laptop;
  - a TorchDispatchMode sees every aten operator the step runs (forward, backward,
    optimizer). An operator is a *launch* (named by the aten op, e.g.
    `aten.convolution.default`) when it allocates a storage or writes one of its
    arguments (schema alias annotation `(a!)`) and touches device storage (Note [Host
    scalars are not launches]); views and metadata-only operators launch nothing. A launch's buffers are the storages of all its tensor arguments
    and results;
  - an output tensor whose storage is not yet live allocates that storage's bytes,
    rounded up to 512 bytes as PyTorch's CUDA caching allocator rounds every block
    (kMinBlockSize); empty storages allocate nothing;
  - every output tensor gets a weakref finalizer; a storage is freed when the last
    tensor seen on it dies. PyTorch keeps a tensor's Python object alive while C++
    (autograd's saved tensors, .grad) still holds it, so a finalizer runs when the
    tensor really goes, in the order reference counting frees it, as on a GPU;
  - `step` runs twice: the first (warm-up) creates gradients and optimizer state,
    the second is the recorded iteration. Storages live when it starts are the
    long-lived buffers (parameters, gradients, optimizer state, BN statistics);
  - each launch's duration is modeled (Note [Modeled durations] in docs/traces.md): the larger of its
    FLOPs over the device's FP32 rate and its bytes over the memory bandwidth, divided
    by the fraction of the device its thread blocks fill (Note [Wave efficiency] in
    docs/traces.md), at least the device's launch latency;
  - the allocations and frees of the whole run, in order, can be handed back as an
    allocation trace (allocation_trace) for the caching allocator model.

A custom operator's FLOPs come from register_op_flops; an operator that cannot run on
meta raises RecordError naming it and the module whose forward was running. Any model,
precision and checkpointing: torch_step.py.

Needs torch (Debian's python3-torch 1.13, or 2.x); the rest of scripts/lib does not.
"""
from __future__ import annotations

import gc
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from oprof import Allocation, Copy, Launch, Profile

REPO = Path(__file__).resolve().parent.parent.parent
# An installed oversub names its device models in OVERSUB_DEVICE_MODELS_DIR.
DEVICE_DIR = Path(os.environ.get("OVERSUB_DEVICE_MODELS_DIR") or REPO / "tests/simgpu/devices")
BLOCK_BYTES = 512            # CUDACachingAllocator kMinBlockSize: every size rounds up to it
BASE_ADDRESS = 0x7F0000000000  # synthetic addresses start here (no real device was used)

# Operators that only allocate (no kernel runs): their results are allocations.
ALLOCATION_ONLY = {"aten.empty.memory_format", "aten.empty_strided.default",
                   "aten.new_empty.default", "aten.new_empty_strided.default",
                   "aten.empty_like.default"}


# ---- device model ------------------------------------------------------------------

@dataclass
class DeviceModel:
    """The figures of one simgpu device model file (tests/simgpu/devices/*.model)."""
    key: str
    name: str
    memory_bytes: int
    fp32_flops: float           # FLOP/s
    memory_bandwidth: float     # bytes/s
    h2d_bytes_per_s: float      # pinned
    d2h_bytes_per_s: float
    sm_count: int = 1
    max_threads_per_sm: int = 2048
    launch_latency_ns: float = 0.0

    def slots(self, threads_per_block: int, per_sm_limit: int | None = None) -> int:
        """Thread blocks of threads_per_block the whole device runs at once."""
        per_sm = self.max_threads_per_sm // threads_per_block
        if per_sm_limit is not None:
            per_sm = min(per_sm, per_sm_limit)
        return max(1, self.sm_count * per_sm)

    def kernel_ns(self, flops: float, bytes_moved: float, efficiency: float = 1.0) -> int:
        """A roofline at the device's peak figures, divided by the launch's wave
        efficiency, never under the launch latency (Note [Modeled durations] in
        docs/traces.md)."""
        seconds = max(flops / self.fp32_flops, bytes_moved / self.memory_bandwidth)
        ns = seconds * 1e9 / max(efficiency, 1e-9)
        return max(1, int(max(ns, self.launch_latency_ns) + 0.5))


_SIZE = re.compile(r"^([0-9.]+)\s*([KMGT]i?B)?$")
_UNITS = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def device_names() -> list[str]:
    return sorted(p.stem for p in DEVICE_DIR.glob("*.model"))


def load_device(key: str) -> DeviceModel:
    """Reads tests/simgpu/devices/<key>.model, the figures simgpu itself runs on."""
    path = DEVICE_DIR / f"{key}.model"
    if not path.is_file():
        raise SystemExit(f"trace-torch: no device model {path}; known: "
                         f"{', '.join(device_names())}")
    kv: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip()
    m = _SIZE.match(kv["memory"])
    if not m:
        raise SystemExit(f"trace-torch: {path}: memory = {kv['memory']!r} is not a size")
    return DeviceModel(key, kv["name"], int(float(m.group(1)) * _UNITS[m.group(2)]),
                       float(kv["fp32_flops"]), float(kv["memory_bandwidth"]),
                       float(kv["h2d_pinned_bandwidth"]), float(kv["d2h_pinned_bandwidth"]),
                       int(kv["sm_count"]), int(kv["max_threads_per_sm"]),
                       float(kv["launch_latency_ns"]))


# ---- FLOPs of one operator ----------------------------------------------------------

# Custom operators' FLOPs, by the aten-style name the recorder gives a launch.
_OP_FLOPS: dict[str, Callable[[tuple, dict, Any], float]] = {}


def register_op_flops(name: str, fn: Callable[[tuple, dict, Any], float]) -> None:
    """Gives the FLOPs of an operator the built-in rules do not know (a custom or fused
    op). name is the string the recorder names its launches by, `str(func)` of the
    OpOverload: "namespace.op.overload", e.g. "oversub.flash_attention.default" or
    "aten.mm.default". fn(args, kwargs, out) gets the operator's arguments and result
    (meta tensors: shapes and dtypes, no values) and returns its FLOPs as a float.
    op_flops and launch_ns consult this registry first; launch_ns then models the
    launch as an elementwise-shaped kernel (Note [Wave efficiency] in docs/traces.md):
    the roofline of these FLOPs and the bytes of all its tensors, over blocks of 512
    elements of its largest tensor. Registering a name again replaces its function."""
    _OP_FLOPS[name] = fn



def _tensors(x: Any, found: list | None = None) -> list:
    """The tensors in x (nested tuples, lists and dicts), in order: what the recorder
    needs of torch's tree_flatten, at a fraction of its cost per operator."""
    if found is None:
        found = []
    if isinstance(x, torch.Tensor):
        found.append(x)
    elif isinstance(x, (tuple, list)):
        for v in x:
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif isinstance(v, (tuple, list, dict)):
                _tensors(v, found)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, found)
    return found


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _per_output(weight: Any) -> int:
    """Multiply-adds per output element of a convolution: C_in/groups x kernel."""
    n = 1
    for d in weight.shape[1:]:
        n *= d
    return n


def op_flops(name: str, args: tuple, out: Any, kwargs: dict | None = None) -> float:
    """FLOPs of one aten operator: a registered function's (register_op_flops) first;
    multiply-adds count 2 for convolutions and matrix products; every other operator
    counts one per element of its largest tensor."""
    custom = _OP_FLOPS.get(name)
    if custom is not None:
        return float(custom(args, kwargs or {}, out))
    if name == "aten.convolution.default":
        w = args[1]
        return 2.0 * _numel(out) * _per_output(w)
    if name == "aten.convolution_backward.default":
        grad_out, w, mask = args[0], args[2], args[10]
        forward = 2.0 * _numel(grad_out) * _per_output(w)
        return forward * (int(bool(mask[0])) + int(bool(mask[1])))
    if name in ("aten.mm.default", "aten.addmm.default", "aten.bmm.default",
                "aten.baddbmm.default"):
        a = args[1] if name in ("aten.addmm.default", "aten.baddbmm.default") else args[0]
        return 2.0 * _numel(out) * a.shape[-1]
    return float(max((t.numel() for t in _tensors((args, out))), default=0))


# ---- how much of the device one launch fills (Note [Wave efficiency] in docs/traces.md)
# ----------------

# Elementwise and every other non-GEMM kernel: PyTorch 1.13's elementwise loops run
# blocks of num_threads() = 4 warps = 128 threads, each thread thread_work_size() = 4
# elements (aten/src/ATen/native/cuda/thread_constants.h): 512 elements per block.
ELEMENTWISE_THREADS = 128
ELEMENTWISE_BLOCK_ELEMENTS = 512
# Convolutions and matrix products: output tiles of CUTLASS's default FP32 (SIMT) GEMM,
# DefaultGemmConfiguration<OpClassSimt>: ThreadblockShape 128x128x8, WarpShape 32x64x8,
# so 8 warps = 256 threads per tile (cutlass/gemm/device/default_gemm_configuration.h).
GEMM_TILE = 128
GEMM_THREADS = 256
# Tiles resident per SM: 64K 32-bit registers per SM on every device model here
# (CUDA C Programming Guide, technical specifications per compute capability, 3.5 to
# 9.0) over 256 threads of at least 96 registers each (64 accumulators: 128x128 / 256,
# plus the double-buffered 8-element A and B fragments, 2 x 16): floor(65536 / 24576).
GEMM_TILES_PER_SM = 2


def _tiles(rows: int, cols: int) -> int:
    return -(-rows // GEMM_TILE) * -(-cols // GEMM_TILE)


def wave_efficiency(blocks: int, slots: int) -> float:
    """The fraction of the device's block slots a launch of `blocks` blocks keeps busy:
    it runs in ceil(blocks / slots) waves, the last one partly empty."""
    if blocks <= 0:
        return 1.0
    waves = -(-blocks // slots)
    return blocks / (waves * slots)


def launch_ns(device: DeviceModel, name: str, args: tuple, kwargs: dict, out: Any) -> int:
    """The roofline of op_flops and the bytes moved, divided by the launch's wave
    efficiency, at least the launch latency (Notes [Modeled durations] and [Wave
    efficiency] in docs/traces.md)."""
    tensors = _tensors((args, kwargs, out))
    moved = float(sum(t.numel() * t.element_size() for t in tensors))
    if name in _OP_FLOPS:
        largest = max((t.numel() for t in tensors), default=0)
        eff = wave_efficiency(-(-largest // ELEMENTWISE_BLOCK_ELEMENTS),
                              device.slots(ELEMENTWISE_THREADS))
        return device.kernel_ns(op_flops(name, args, out, kwargs), moved, eff)
    gemm_slots = device.slots(GEMM_THREADS, GEMM_TILES_PER_SM)
    if name == "aten.convolution.default":
        # implicit GEMM: rows = N x H_out x W_out, columns = C_out
        c_out = args[1].shape[0]
        eff = wave_efficiency(_tiles(_numel(out) // max(c_out, 1), c_out), gemm_slots)
        return device.kernel_ns(op_flops(name, args, out), moved, eff)
    if name == "aten.convolution_backward.default":
        grad_out, inp, w, mask = args[0], args[1], args[2], args[10]
        one = 2.0 * _numel(grad_out) * _per_output(w) / device.fp32_flops
        seconds = 0.0
        if mask[0]:  # data gradient: implicit GEMM over the input, rows N x H x W, cols C_in
            c_in = inp.shape[1]
            seconds += one / wave_efficiency(_tiles(_numel(inp) // max(c_in, 1), c_in),
                                             gemm_slots)
        if mask[1]:  # weight gradient: split-K fills the device (Note [Wave efficiency] in docs/traces.md)
            seconds += one
        seconds = max(seconds, moved / device.memory_bandwidth)
        return max(1, int(max(seconds * 1e9, device.launch_latency_ns) + 0.5))
    if name in ("aten.mm.default", "aten.addmm.default", "aten.bmm.default",
                "aten.baddbmm.default"):
        rows, cols = out.shape[-2], out.shape[-1]
        batch = out.shape[0] if out.dim() == 3 else 1
        eff = wave_efficiency(batch * _tiles(rows, cols), gemm_slots)
        return device.kernel_ns(op_flops(name, args, out), moved, eff)
    largest = max((t.numel() for t in tensors), default=0)
    eff = wave_efficiency(-(-largest // ELEMENTWISE_BLOCK_ELEMENTS),
                          device.slots(ELEMENTWISE_THREADS))
    return device.kernel_ns(op_flops(name, args, out, kwargs), moved, eff)


# ---- the recorder -------------------------------------------------------------------

@dataclass
class _Buffer:
    bytes: int
    address: int
    alloc_at: int | None      # None: live before the recorded iteration (long-lived)
    free_at: int | None = None
    ordinal: int | None = None


# A tensor's untyped storage: untyped_storage() in torch 2.x, _storage() in 1.13.
_untyped = (torch.Tensor.untyped_storage if hasattr(torch.Tensor, "untyped_storage")
            else torch.Tensor._storage)


def _storage_key(t: Any) -> int:
    return _untyped(t)._cdata


def _storage_bytes(t: Any) -> int:
    return _untyped(t).nbytes()


# Note [Host scalars are not launches]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The dispatch mode also sees operators on CPU tensors: Adam's and AdamW's step counts
# (`state["step"]`, a CPU tensor unless capturable=True, as on CUDA), GradScaler's
# bookkeeping, a user's host-side arithmetic. On a GPU these run on the host and launch
# nothing, so an operator that touches no device storage (no meta tensor with bytes
# among its arguments and results) is not a launch. A copy from a CPU tensor to the
# device (`.to("cuda")` of a host tensor, recorded as `.to("meta")`) is a host-to-device
# copy record, not a launch.
HOST_COPIES = {"aten._to_copy.default", "aten.copy_.default"}


def _from_host(flat_args: list) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in flat_args)


class RecordError(RuntimeError):
    """An operator the recorder could not run on meta tensors: names the aten operator,
    the module whose forward was running, the cause and what to do."""

    def __init__(self, op: str, module: str, cause: BaseException) -> None:
        self.op, self.module, self.cause = op, module, cause
        where = f"in module '{module}'" if module else "outside any module's forward " \
            "(the loss, the backward pass, the optimizer or the step's own code)"
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        text = text.split(" This could be because")[0]
        self.at = _caller()
        at = f" (at {self.at})" if self.at else ""
        super().__init__(f"could not record {op} {where}{at}: "
                         f"{type(cause).__name__}: {text}\n  {_advice(op, cause)}")


def _caller() -> str:
    """file:line of the innermost frame outside torch and this file: the code that
    called the operator."""
    import traceback
    here = os.path.dirname(os.path.abspath(__file__))
    ours = {os.path.join(here, f) for f in ("torch_trace.py", "torch_step.py",
                                            "trace_torch_cli.py")}
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if (not path.startswith(os.path.dirname(torch.__file__)) and path not in ours
                and "importlib" not in path):
            return f"{frame.filename}:{frame.lineno}"
    return ""


def _advice(op: str, cause: BaseException) -> str:
    text = str(cause)
    if "_local_scalar_dense" in op or "item()" in text or "data-dependent" in text:
        return ("the step reads a tensor's value on the host (.item(), bool(tensor), "
                "a value-dependent shape or branch); meta tensors have no values, so "
                "move that read out of the step or replace it with a constant")
    if isinstance(cause, NotImplementedError) or "Meta" in text or "meta" in text:
        return ("the operator has no meta kernel in this torch: register one "
                "(torch.library.Library(namespace, 'IMPL').impl(name, fn, 'Meta')), or, "
                "if its result is shaped like one argument, add it to "
                "torch_trace.SHAPED_LIKE_ARG; give its FLOPs with "
                "torch_trace.register_op_flops")
    return "the operator failed on meta tensors; the message above says why"


def _writes_an_argument(func: Any) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write
               for a in func._schema.arguments)


class Recorder(TorchDispatchMode):
    """Turns the aten operators of a step into buffers and launches."""

    def __init__(self, device: DeviceModel) -> None:
        super().__init__()
        self.device = device
        self.recording = False
        self.closed = False
        self.buffers: list[_Buffer] = []
        self.live: dict[int, list[int]] = {}   # storage key -> [buffer id, tensors alive]
        self.launches: list[tuple[str, int, list[int]]] = []  # name, duration_ns, buffer ids
        self.copies: list[Copy] = []
        self.next_address = BASE_ADDRESS
        self.ordinals = 0
        self.warmup_launches = 0
        self.dead_before: set[int] = set()
        self.modules: list[str] = []  # module paths whose forward is running (hooks)
        # Every allocation and free in order, from the first parameter to the end of the
        # recorded iteration: ("a", buffer, requested bytes), ("f", buffer), ("i", n) at
        # the start of iteration n. What a caching allocator sees (allocation_trace()).
        self.events: list[tuple] = []

    # -- buffers --
    def track(self, t: Any) -> int | None:
        """The buffer id of t's storage, allocating it when not live."""
        if not isinstance(t, torch.Tensor) or t.device.type != "meta":
            return None
        nbytes = _storage_bytes(t)
        if nbytes == 0:
            return None  # the caching allocator serves empty tensors without memory
        key = _storage_key(t)
        entry = self.live.get(key)
        if entry is None:
            size = -(-nbytes // BLOCK_BYTES) * BLOCK_BYTES
            at = len(self.launches) if self.recording else None
            buf = _Buffer(size, self.next_address, at)
            if self.recording:
                buf.ordinal = self.ordinals
                self.ordinals += 1
            self.next_address += size
            self.buffers.append(buf)
            if not self.closed:
                self.events.append(("a", len(self.buffers) - 1, nbytes))
            entry = [len(self.buffers) - 1, 0]
            self.live[key] = entry
        entry[1] += 1
        weakref.finalize(t, self._release, key, entry[0])
        return entry[0]

    def _release(self, key: int, buffer_id: int) -> None:
        entry = self.live.get(key)
        if entry is None or entry[0] != buffer_id:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            if not self.closed:
                self.events.append(("f", buffer_id))
            if self.recording and not self.closed:
                self.buffers[buffer_id].free_at = len(self.launches)

    def _known(self, t: Any) -> int | None:
        if not isinstance(t, torch.Tensor) or t.device.type != "meta":
            return None
        entry = self.live.get(_storage_key(t)) if _storage_bytes(t) else None
        return entry[0] if entry is not None else self.track(t)

    def copy_in(self, t: Any) -> None:
        """A host-to-device copy into t (the input batch), before the next launch."""
        b = self._known(t)
        if b is None or not self.recording:
            return
        nbytes = t.numel() * t.element_size()
        ns = int(nbytes * 1e9 / self.device.h2d_bytes_per_s + 0.5)
        self.copies.append(Copy(len(self.launches), "h2d", nbytes, ns, b))

    # -- operators --
    def where(self) -> str:
        """The module whose forward is running, for error messages."""
        return self.modules[-1] if self.modules else ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = str(func)
        flat_in = _tensors((args, kwargs))
        inputs = [self._known(t) for t in flat_in]
        try:
            out = func(*args, **kwargs)
        except NotImplementedError as e:
            try:
                out = run_without_meta_kernel(name, func, args, kwargs)
            except NotImplementedError:
                raise RecordError(name, self.where(), e) from e
        except RecordError:
            raise
        except Exception as e:
            raise RecordError(name, self.where(), e) from e
        before = len(self.buffers)
        outputs = [self.track(t) for t in _tensors(out)]
        allocated = len(self.buffers) > before
        if name in ALLOCATION_ONLY or not (allocated or _writes_an_argument(func)):
            return out
        ids = sorted({b for b in inputs + outputs if b is not None})
        if not ids:
            # No device storage is touched (CPU tensors only, such as an optimizer's
            # step count, or empty tensors): see Note [Host scalars are not launches].
            return out
        if name in HOST_COPIES and _from_host(flat_in):
            # A CPU tensor moved to the device: a host-to-device copy, not a kernel.
            for t in _tensors(out):
                self.copy_in(t)
            return out
        ns = launch_ns(self.device, name, args, kwargs, out)
        self.launches.append((name, ns, ids))
        return out

    # -- phases --
    def begin(self) -> None:
        """The recorded iteration starts: what is live now is long-lived."""
        gc.collect()
        self.warmup_launches = len(self.launches)
        self.launches = []
        self.copies = []
        live = {entry[0] for entry in self.live.values()}
        self.dead_before = {i for i in range(len(self.buffers)) if i not in live}
        self.recording = True
        self.events.append(("i", 1))

    def end(self) -> None:
        gc.collect()
        self.closed = True


def run_without_meta_kernel(name: str, func: Any, args: Any, kwargs: Any) -> Any:
    """An operator with no meta kernel in PyTorch 1.13: its decomposition (one launch,
    its temporaries not recorded), else results shaped as the CUDA kernel's."""
    from torch._decomp import decomposition_table
    if func in decomposition_table:
        return decomposition_table[func](*args, **kwargs)
    if name == "aten.convolution_backward.default":
        grad_out, inp, weight, bias_sizes = args[:4]
        mask = args[10]
        return (torch.empty_like(inp) if mask[0] else None,
                torch.empty_like(weight) if mask[1] else None,
                grad_out.new_empty(bias_sizes) if mask[2] and bias_sizes else None)
    like = SHAPED_LIKE_ARG.get(name)
    if like is not None:
        return torch.empty_like(args[like])
    schema = func._schema
    if not schema.returns and _writes_an_argument(func):
        # Updates its arguments in place and returns nothing (the _foreach_*_ operators,
        # GradScaler's _amp_foreach_non_finite_check_and_unscale_): shapes are unchanged.
        return None
    if (name.startswith("aten._foreach_") and len(schema.returns) == 1
            and str(schema.returns[0].type) == "List[Tensor]"):
        return [torch.empty_like(t) for t in args[0]]  # _foreach_sqrt and the like
    raise NotImplementedError(f"{name}: no meta kernel, no decomposition and no rule in "
                              f"{__file__}")


# Operators without a meta kernel or a decomposition in PyTorch 1.13 whose result
# has the shape, dtype and layout of one argument (its index here).
SHAPED_LIKE_ARG: dict[str, int] = {
    "aten._adaptive_avg_pool2d_backward.default": 1,  # (grad_output, self)
}


# ---- one iteration as a profile -----------------------------------------------------

# Note [Dropout as on CUDA]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# F.dropout on a CUDA tensor runs the fused aten.native_dropout (a bool mask saved for
# backward, 1 byte per element); on any other device it multiplies by a float noise
# tensor (4 bytes per element). While recording, F.dropout takes the CUDA path.
class cuda_dropout:
    """F.dropout as on a CUDA tensor, while recording (Note [Dropout as on CUDA])."""

    def __enter__(self) -> None:
        from torch.nn import functional
        self.original = functional.dropout

        def dropout(input: Any, p: float = 0.5, training: bool = True,
                    inplace: bool = False) -> Any:
            if not training or inplace or not 0 < p < 1 or input.numel() == 0:
                return self.original(input, p, training, inplace)
            return torch.native_dropout(input, p, True)[0]

        functional.dropout = dropout

    def __exit__(self, *exc: Any) -> None:
        from torch.nn import functional
        functional.dropout = self.original


def record_iteration(model: Any, step: Callable[[Recorder], None], device: DeviceModel,
                     program: str, allocation_trace_out: list[str] | None = None) -> Profile:
    """Runs step twice on meta tensors (warm-up, then the recorded iteration) and
    returns the recorded one as a profile. model's parameters and buffers must be on
    the meta device; step builds its batch (calling rec.copy_in on it), runs forward,
    loss, backward and the optimizer."""
    rec = Recorder(device)
    for t in list(model.parameters()) + list(model.buffers()):
        rec.track(t)
    hooks = _module_hooks(model, rec.modules)
    try:
        with cuda_dropout(), rec:
            rec.events.append(("i", 0))
            step(rec)
            rec.modules.clear()
            rec.begin()
            step(rec)
            rec.end()
    finally:
        for h in hooks:
            h.remove()
    if allocation_trace_out is not None:
        allocation_trace_out.extend(allocation_trace(rec, program))
    return to_profile(rec, program)


def _module_hooks(model: Any, stack: list[str]) -> list[Any]:
    """Forward pre-hooks and hooks keeping stack = the paths of the modules whose forward
    is running, innermost last (for RecordError)."""
    hooks = []
    for path, module in model.named_modules():
        path = f"{path} ({type(module).__name__})" if path else type(module).__name__

        def push(_m: Any, _args: Any, path: str = path) -> None:
            stack.append(path)

        def pop(_m: Any, _args: Any, _out: Any) -> None:
            if stack:
                stack.pop()
        hooks.append(module.register_forward_pre_hook(push))
        hooks.append(module.register_forward_hook(pop))
    return hooks


def allocation_trace(rec: Recorder, program: str) -> list[str]:
    """The allocations and frees of setup, warm-up and the recorded iteration, in order, as
    an allocation trace (docs/trace-format.md): what the CUDA caching allocator is asked
    for. The fragmentation benchmark's caching allocator model replays it
    (`oversub trace-torch --check`, Note [Comparing like with like] in docs/traces.md)."""
    lines = ["# oversub allocation trace v1", f"# source: {program}",
             "# what: every storage allocation and free of setup, the warm-up iteration (i 0) "
             "and the recorded iteration (i 1), sizes as requested"]
    for e in rec.events:
        if e[0] == "a":
            lines.append(f"a {e[1]} {e[2]}")
        elif e[0] == "f":
            lines.append(f"f {e[1]}")
        else:
            lines.append(f"i {e[1]}")
    return lines


def to_profile(rec: Recorder, program: str) -> Profile:
    per_iteration = [i for i, b in enumerate(rec.buffers)
                     if b.alloc_at is not None and i not in rec.dead_before]
    long_lived = [i for i, b in enumerate(rec.buffers)
                  if b.alloc_at is None and i not in rec.dead_before]
    per_iteration.sort(key=lambda i: rec.buffers[i].ordinal)
    long_lived.sort(key=lambda i: rec.buffers[i].address)
    index = {b: k for k, b in enumerate(per_iteration + long_lived)}
    # A recording ("recorded" in the format's iteration sources, where it is known).
    import oprof
    source = "recorded" if "recorded" in getattr(oprof, "SOURCES", ()) else "api"
    p = Profile(source=source, cupti=False, iterations_seen=2,
                total_launches=rec.warmup_launches + len(rec.launches),
                first_launch=rec.warmup_launches, marker="", program=program,
                capacity_bytes=rec.device.memory_bytes,
                h2d_bytes_per_s=int(rec.device.h2d_bytes_per_s),
                d2h_bytes_per_s=int(rec.device.d2h_bytes_per_s),
                iteration_kernel_ns=sum(ns for _, ns, _ in rec.launches))
    names: dict[str, int] = {}
    for ordinal, i in enumerate(per_iteration):
        b = rec.buffers[i]
        p.allocations.append(Allocation(ordinal, b.bytes, b.address, b.alloc_at, b.free_at,
                                        False, None))
    for i in long_lived:
        b = rec.buffers[i]
        p.allocations.append(Allocation(None, b.bytes, b.address, 0, None, True, None))
    for name, ns, ids in rec.launches:
        if name not in names:
            names[name] = len(p.strings)
            p.strings.append(name)
        p.launches.append(Launch(names[name], ns, 0, sorted(index[b] for b in ids)))
    for c in rec.copies:
        p.copies.append(Copy(c.before_launch, c.kind, c.bytes, c.duration_ns,
                             index[c.buffer] if c.buffer is not None else None))
    return p
