#!/usr/bin/env python3
"""Regenerate the simtrain allocation traces in traces/ (docs/trace-format.md).

Runs build/tests/workloads/simtrain on simgpu with --trace-allocs, in every
allocator mode (default: one cudaMalloc per tensor; --caching; --streams 2) at a few
model sizes, two iterations each (setup, iteration 0, iteration 1).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> simtrain arguments. Sizes span the caching allocator's cases: small
# tensors (2 MiB segments), 1-10 MiB tensors (20 MiB segments), >10 MiB tensors.
SIZES = {
    "d8-w128-b64": ["--depth", "8", "--width", "128", "--batch", "64"],
    "d16-w512-b128": ["--depth", "16", "--width", "512", "--batch", "128"],
    "d8-w1024-b256": ["--depth", "8", "--width", "1024", "--batch", "256"],
    "d4-w2048-b32": ["--depth", "4", "--width", "2048", "--batch", "32"],
}
MODES = {"direct": [], "caching": ["--caching"], "streams2": ["--streams", "2"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=Path("build"), help="meson build folder")
    ap.add_argument("--out", type=Path, default=HERE / "traces", help="output folder")
    args = ap.parse_args()
    simtrain = args.build / "tests" / "workloads" / "simtrain"
    if not simtrain.exists():
        print(f"capture_simtrain: {simtrain} not built", file=sys.stderr)
        return 2
    env = dict(os.environ,
               LD_LIBRARY_PATH=str(args.build / "tests" / "simgpu"),
               SIMGPU_DEVICE_DIR=str(args.build / "tests" / "simgpu" / "devices"))
    args.out.mkdir(parents=True, exist_ok=True)
    for size, size_args in SIZES.items():
        for mode, mode_args in MODES.items():
            path = args.out / f"simtrain-{size}-{mode}.trace"
            cmd = [str(simtrain), *size_args, *mode_args, "--iters", "2",
                   "--trace-allocs", str(path)]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
