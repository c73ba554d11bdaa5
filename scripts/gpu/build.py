"""The programs gpu-validate runs, found in a meson build (--sim) or built with nvcc.

On simgpu (`--sim`) every program comes from the meson build folder (simtrain,
the preload probes, gpu_facts) and runs with LD_LIBRARY_PATH at its simgpu
libraries. On a GPU machine there is no meson: each program is compiled by nvcc
straight from the sources (tests/gpu/nvcc_build_test.py builds them all wherever a
toolkit is installed, so a GPU window never starts with one that does not compile),
with `-cudart shared` (a preloaded library cannot
interpose calls into a statically linked runtime) and an rpath to the toolkit's
library folder, into a scratch folder. The simgpu probes with kernels
(stress_probe.cc, tests/gpu/hazard_probe.cc) are compiled as CUDA with
tests/gpu/nvcc_include first on the include path, where simgpu/kernel.h registers
nothing.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .common import REPO, kit

PROBES = ("memgetinfo_probe", "fork_probe", "stress_probe", "real_runtime_probe", "driver_probe")


@dataclass
class programs:
    """Paths of the programs (None when missing, with the reason in `missing`)."""
    simtrain: Path | None = None
    facts: Path | None = None
    probes: dict[str, Path] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)   # simgpu's variables in --sim
    missing: dict[str, str] = field(default_factory=dict)
    toolkit: str = ""


def from_meson(build: Path) -> programs:
    found = programs()
    simgpu = build / "tests" / "simgpu"
    found.env = {"LD_LIBRARY_PATH": str(simgpu), "SIMGPU_DEVICE_DIR": str(simgpu / "devices")}
    found.toolkit = f"simgpu ({simgpu})"
    wanted = {"simtrain": build / "tests" / "workloads" / "simtrain",
              "gpu_facts": build / "tests" / "gpu" / "gpu_facts"}
    wanted.update({p: build / "tests" / "preload" / p for p in PROBES})
    wanted["oversub-replay"] = build / "tests" / "workloads" / "oversub-replay"
    wanted["hazard_probe"] = build / "tests" / "gpu" / "hazard_probe"
    for name, path in wanted.items():
        if not path.is_file():
            found.missing[name] = f"{path} not built (run ninja -C {build})"
            continue
        if name == "simtrain":
            found.simtrain = path
        elif name == "gpu_facts":
            found.facts = path
        else:
            found.probes[name] = path
    if not (simgpu / "libcudart.so.13").is_file():
        found.missing["simgpu"] = f"{simgpu}/libcudart.so.13 not built"
    return found


def find_nvcc() -> Path | None:
    candidates = [shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


def cudart_dir(nvcc: Path) -> Path:
    root = nvcc.resolve().parent.parent
    for d in (root / "lib64", root / "targets" / "x86_64-linux" / "lib", root / "lib"):
        if (d / "libcudart.so.13").exists() or (d / "libcudart.so").exists():
            return d
    return root / "lib64"


def with_nvcc(k: kit, work: Path, arch: str) -> programs:
    found = programs()
    nvcc = find_nvcc()
    if nvcc is None:
        for name in ("simtrain", "gpu_facts", *PROBES, "hazard_probe", "oversub-replay"):
            found.missing[name] = "nvcc not found (PATH, CUDA_HOME, /usr/local/cuda/bin)"
        return found
    work.mkdir(parents=True, exist_ok=True)
    libdir = cudart_dir(nvcc)
    version = k.run([str(nvcc), "--version"], label="toolkit")
    release = [l for l in version.stdout.splitlines() if "release" in l]
    found.toolkit = f"{nvcc} ({release[0].strip() if release else '?'})"
    common = [str(nvcc), "-O2", "-std=c++20", "-cudart", "shared",
              "-Xlinker", "-rpath", "-Xlinker", str(libdir)]
    preload = REPO / "tests" / "preload"
    jobs = {
        "gpu_facts": [f"-arch={arch}", "-x", "cu", "-I", REPO / "tests" / "gpu" / "nvcc_include",
                      REPO / "tests" / "gpu" / "gpu_facts.cc"],
        "simtrain": [f"-arch={arch}", REPO / "tests" / "workloads" / "simtrain.cu"],
        "stress_probe": [f"-arch={arch}", "-x", "cu", "-I", REPO / "tests" / "gpu" / "nvcc_include",
                         preload / "stress_probe.cc"],
        "hazard_probe": [f"-arch={arch}", "-x", "cu", "-I", REPO / "tests" / "gpu" / "nvcc_include",
                         REPO / "tests" / "gpu" / "hazard_probe.cc"],
        "memgetinfo_probe": [preload / "memgetinfo_probe.cc"],
        "fork_probe": [preload / "fork_probe.cc"],
        "real_runtime_probe": [preload / "real_runtime_probe.cc"],
        # Step 6's replay of the shipped traces (tests/workloads/README.md).
        "oversub-replay": [f"-arch={arch}", "-I", REPO, REPO / "tests" / "workloads" / "replay.cu",
                           REPO / "profiler" / "profile_format.cc"],
        # The driver-level probe needs its two wrapper libraries first (below).
    }
    simtrain_job = jobs["simtrain"]
    simtrain_job.append("-ldl")  # --api driver|dlsym dlopens libcuda

    def build(name: str) -> tuple[str, Path, str]:
        out = work / name
        proc = k.run([*common, *[str(a) for a in jobs[name]], "-o", str(out)],
                     timeout_s=300, label=f"build {name}")
        if proc.returncode != 0 or not out.is_file():
            return name, out, f"nvcc failed: {proc.stderr.strip()[-300:]}"
        return name, out, ""

    def build_driver_probe() -> tuple[str, Path, str]:
        # libprobe_next_b.so, then libprobe_next_a.so (wraps b's through RTLD_NEXT),
        # then driver_probe linked to both, in that order (the rtld-next case). Not
        # linked to libcuda: the dlsym case needs libcuda opened privately (RTLD_LOCAL).
        for lib, extra in (("probe_next_b", []), ("probe_next_a", ["-ldl"])):
            out = work / f"lib{lib}.so"
            proc = k.run([*common, "-shared", "-Xcompiler", "-fPIC", str(preload / f"{lib}.cc"),
                          *extra, "-o", str(out)], timeout_s=300, label=f"build {lib}")
            if proc.returncode != 0:
                return "driver_probe", out, f"nvcc failed: {proc.stderr.strip()[-300:]}"
        out = work / "driver_probe"
        proc = k.run([*common, str(preload / "driver_probe.cc"), "-L", str(work), "-Xlinker",
                      "--no-as-needed", "-lprobe_next_a", "-lprobe_next_b", "-ldl",
                      "-Xlinker", "-rpath", "-Xlinker", str(work), "-o", str(out)],
                     timeout_s=300, label="build driver_probe")
        if proc.returncode != 0 or not out.is_file():
            return "driver_probe", out, f"nvcc failed: {proc.stderr.strip()[-300:]}"
        return "driver_probe", out, ""

    with ThreadPoolExecutor(max_workers=len(jobs) + 1) as pool:
        results = list(pool.map(build, jobs)) + [pool.submit(build_driver_probe).result()]
        for name, out, error in results:
            if error:
                found.missing[name] = error
            elif name == "simtrain":
                found.simtrain = out
            elif name == "gpu_facts":
                found.facts = out
            else:
                found.probes[name] = out
    return found
