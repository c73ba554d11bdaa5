#!/usr/bin/env python3
"""Nothing thrown crosses the ABI edge (Note [Nothing crosses the ABI edge] in
interpose/abi_guard.h): with the test-only fault point OVERSUB_TEST_THROW making
oversub's work inside one entry point throw, the application gets CUDA's error code
for that call (cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY for bad_alloc,
cudaErrorUnknown / CUDA_ERROR_UNKNOWN for anything else), the lookups (dlsym,
cuGetProcAddress_v2) answer the driver's own function, the log names the call and
what was thrown once, and the process goes on to exit normally.

  throw_test.py --lib liboversub.so --probe driver_probe --simtrain simtrain
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from swap_checks import fail, run

CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY
CUDA_ERROR_UNKNOWN = 999          # cudaErrorUnknown, CUDA_ERROR_UNKNOWN
LINE_RE = re.compile(r"^(cudaMalloc|cudaMalloc-again|cuMemAlloc_v2) (-?\d+) (\w+)$", re.M)
ANSWER_RE = re.compile(r"^(cuGetProcAddress_v2 cuMemAlloc|dlsym cuMemAlloc_v2) (\S+)$", re.M)
SIMTRAIN_ARGS = ["--depth", "4", "--width", "64", "--batch", "16", "--iters", "2"]


def probe(args: argparse.Namespace, throw: str | None) -> tuple[dict, dict, str]:
    settings = {"OVERSUB_MODE": "pool"}
    if throw is not None:
        settings["OVERSUB_TEST_THROW"] = throw
    proc = run([str(args.probe), "throw"], settings, args.lib)
    if proc.returncode != 0 or "ok throw" not in proc.stdout:
        fail(f"driver_probe throw did not run to its end with OVERSUB_TEST_THROW={throw}", proc)
    codes = {m.group(1): (int(m.group(2)), m.group(3)) for m in LINE_RE.finditer(proc.stdout)}
    answers = {m.group(1): m.group(2) for m in ANSWER_RE.finditer(proc.stdout)}
    if len(codes) != 3 or len(answers) != 2:
        fail("driver_probe throw printed too little", proc)
    return codes, answers, proc.stderr


def expect_logged_once(stderr: str, symbol: str, thrown: str, outcome: str) -> None:
    if "unknown option OVERSUB_TEST_THROW" in stderr:
        fail(f"the test-only OVERSUB_TEST_THROW is warned about as an unknown option:\n{stderr}")
    lines = [l for l in stderr.splitlines() if "oversub's own work inside the call failed" in l]
    if len(lines) != 1:
        fail(f"want the throw logged once, got {len(lines)} lines:\n{stderr}")
    if not (lines[0].startswith(f"oversub: error: {symbol}:") and thrown in lines[0] and
            outcome in lines[0]):
        fail(f"the log line does not name {symbol}, {thrown!r} and {outcome!r}: {lines[0]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--probe", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    args = ap.parse_args()
    ok = (0, "allocated")
    oom = (CUDA_ERROR_MEMORY_ALLOCATION, "null")
    unknown = (CUDA_ERROR_UNKNOWN, "null")

    codes, answers, _ = probe(args, None)
    if any(v != ok for v in codes.values()) or set(answers.values()) != {"liboversub.so"}:
        fail(f"without a fault point every call succeeds through oversub: {codes} {answers}")

    for throw, symbol, thrown, want in (
            ("cudaMalloc", "cudaMalloc", "std::bad_alloc", oom),
            ("cudaMalloc:runtime_error", "cudaMalloc", "exception thrown", unknown),
            ("cuMemAlloc_v2", "cuMemAlloc_v2", "std::bad_alloc", oom),
            ("cuMemAlloc_v2:runtime_error", "cuMemAlloc_v2", "exception thrown", unknown)):
        codes, answers, stderr = probe(args, throw)
        failing = "cuMemAlloc_v2" if symbol == "cuMemAlloc_v2" else "cudaMalloc"
        for call, got in codes.items():
            expected = want if call.startswith(failing) else ok
            if got != expected:
                fail(f"OVERSUB_TEST_THROW={throw}: {call} returned {got}, want {expected}")
        code_name = {(oom, False): "cudaErrorMemoryAllocation", (unknown, False): "cudaErrorUnknown",
                     (oom, True): "CUDA_ERROR_OUT_OF_MEMORY",
                     (unknown, True): "CUDA_ERROR_UNKNOWN"}[(want, symbol.startswith("cu") and
                                                            not symbol.startswith("cuda"))]
        expect_logged_once(stderr, symbol, thrown, f"the call returns {code_name}")
        print(f"OVERSUB_TEST_THROW={throw}: {symbol} returned {want[0]}, the rest succeeded")

    # The lookups: the real lookup's answer comes back untouched, and the program goes
    # on. dlsym's is libcuda's own function. cuGetProcAddress_v2's is whatever the
    # driver answered: simgpu's libcuda looks its functions up with dlsym, which is
    # ours, so its answer may already be our hook; it must be a function that works.
    for throw, key, want_object in (
            ("dlsym", "dlsym cuMemAlloc_v2", "libcuda.so.1"),
            ("cuGetProcAddress_v2", "cuGetProcAddress_v2 cuMemAlloc", None)):
        codes, answers, stderr = probe(args, throw)
        if answers[key] == "?" or (want_object is not None and answers[key] != want_object):
            fail(f"OVERSUB_TEST_THROW={throw}: {key} answered {answers[key]}, want "
                 f"{want_object or 'a function'}")
        if any(v != ok for v in codes.values()):
            fail(f"OVERSUB_TEST_THROW={throw}: the calls must succeed: {codes}")
        expect_logged_once(stderr, throw, "std::bad_alloc", "answered unwrapped")
        print(f"OVERSUB_TEST_THROW={throw}: answered from {answers[key]}, calls succeed")

    # Deep inside a launch: the learned schedule (swap mode) throws on every launch.
    # simtrain sees cudaErrorMemoryAllocation at its first launch and exits 1 with its
    # own message; no signal.
    cmd = [str(args.simtrain), *SIMTRAIN_ARGS]
    proc = run(cmd, {"OVERSUB_MODE": "swap", "OVERSUB_POLICY": "cost",
                     "OVERSUB_TEST_THROW": "schedule_before_launch"}, args.lib)
    if proc.returncode != 1 or "simtrain: CUDA error cudaErrorMemoryAllocation" not in proc.stderr:
        fail("simtrain must stop with cudaErrorMemoryAllocation at its first launch, exit 1",
             proc)
    lines = [l for l in proc.stderr.splitlines() if "oversub's own work inside the call failed"
             in l]
    if len(lines) != 1 or "Launch" not in lines[0].split(":")[2] or "std::bad_alloc" not in lines[0]:
        fail(f"want one log line naming the launch and std::bad_alloc: {lines}", proc)
    print(f"swap launch with the schedule throwing: {lines[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
