#!/usr/bin/env python3
"""Every program the GPU kit runs, built with nvcc as the kit builds them on a GPU
machine (scripts/gpu/build.py, with_nvcc): gpu_facts, simtrain, the preload and
driver probes, hazard_probe and oversub-replay. A GPU window lasts minutes, and a
source that compiles against simgpu but not as CUDA would spend it; compiling needs
a toolkit, not a GPU. Fails naming each program nvcc could not build, with nvcc's
last words; skipped (exit 77) where no nvcc is installed.

  nvcc_build_test.py [--arch sm_90]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from gpu import build  # noqa: E402
from gpu.common import kit  # noqa: E402

SKIP = 77  # meson's exit code for a skipped test


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", help="nvcc -arch, as gpu-validate's --arch")
    args = parser.parse_args()
    if build.find_nvcc() is None:
        print("SKIP: no nvcc (PATH, CUDA_HOME, /usr/local/cuda/bin): nothing to build")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="oversub-nvcc-") as tmp:
        k = kit(Path(tmp) / "out", sim=False, quick=True, lib=Path("/nonexistent"))
        found = build.with_nvcc(k, Path(tmp) / "work", args.arch)
        built = sorted(found.probes) + [n for n, p in (("gpu_facts", found.facts),
                                                       ("simtrain", found.simtrain)) if p]
        print(f"toolkit: {found.toolkit}")
        print(f"built for {args.arch}: {', '.join(sorted(built))}")
        for name, why in sorted(found.missing.items()):
            print(f"FAIL: {name}: {why}")
        wanted = {"gpu_facts", "simtrain", "hazard_probe", "oversub-replay", *build.PROBES}
        absent = wanted - set(built) - set(found.missing)
        for name in sorted(absent):
            print(f"FAIL: {name}: neither built nor reported missing")
        return 1 if found.missing or absent else 0


if __name__ == "__main__":
    sys.exit(main())
