#!/usr/bin/env python3
"""scripts/gpu/calibrate.py: a device model from gpu_facts' figures.

1. Round trip on simgpu: gpu_facts run on the h200-measured model gives facts from
   which calibrate writes a model whose device figures (name, memory, SMs, compute
   capability) and managed page size equal that model's and whose pinned and managed
   bandwidths and managed fault cost, timed with events in simgpu's virtual time, are
   within 5% of it. (The VMM and event costs gpu_facts
   times with the host's clock, which on simgpu is the CPU's, not the model's: they
   cannot round-trip here.)
2. A facts file missing a field the model needs: refused (exit 1) with the field's
   dotted name, and nothing written on stdout.

  calibrate_test.py --facts-exe build/tests/gpu/gpu_facts --devices build/tests/simgpu/devices
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CALIBRATE = REPO / "scripts" / "gpu" / "calibrate.py"


def keys(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_0-9]+)\s*=\s*(.*?)\s*(#.*)?$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def number(v: str) -> float:
    m = re.match(r"^([0-9.e+]+)\s*(GiB|MiB|KiB)?$", v)
    scale = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts-exe", type=Path, required=True)
    ap.add_argument("--devices", type=Path, required=True)
    args = ap.parse_args()
    env = {**os.environ, "SIMGPU_DEVICE": "h200-measured", "SIMGPU_DEVICE_DIR": str(args.devices)}
    proc = subprocess.run([str(args.facts_exe), "--mib", "64", "--reps", "3", "--vmm-iters", "5"],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"FAIL: gpu_facts exit {proc.returncode}: {proc.stderr[-500:]}")
        return 1
    facts = json.loads(proc.stdout)
    facts_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"calibrate_test_{os.getpid()}.json"
    facts_path.write_text(json.dumps(facts))
    try:
        base = REPO / "tests" / "simgpu" / "devices" / "h100-pcie.model"
        out = subprocess.run([sys.executable, str(CALIBRATE), str(facts_path), str(base)],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            print(f"FAIL: calibrate exit {out.returncode}: {out.stderr}")
            return 1
        got = keys(out.stdout)
        want = keys((args.devices / "h200-measured.model").read_text())
        problems = []
        for k in ("name", "sm_count", "compute_capability"):
            if got.get(k) != want.get(k):
                problems.append(f"{k}: {got.get(k)!r}, the model has {want.get(k)!r}")
        if abs(number(got["memory"]) - number(want["memory"])) > 0.05 * number(want["memory"]):
            problems.append(f"memory {got['memory']} against {want['memory']}")
        for k in ("h2d_pinned_bandwidth", "d2h_pinned_bandwidth", "managed_h2d_bandwidth",
                  "managed_d2h_bandwidth", "managed_fault_ns"):
            g, w = float(got[k]), float(want[k])
            if abs(g - w) > 0.05 * w:
                problems.append(f"{k} {g:.4g} against the model's {w:.4g} (more than 5% off)")
        # A managed allocation holds whole pages of the model's managed_page_size.
        if got.get("managed_page_size") != want.get("managed_page_size"):
            problems.append(f"managed_page_size {got.get('managed_page_size')!r}, the model has "
                            f"{want.get('managed_page_size')!r}")
        # A discard's cost per page: the model's key, else its default (Note [Discards] in
        # tests/simgpu/driver/managed.h).
        page = number(want["managed_page_size"])
        discard = float(want["managed_discard_page_ns"]) if "managed_discard_page_ns" in want \
            else min(float(want["managed_fault_ns"]),
                     page / float(want["managed_d2h_bandwidth"]) * 1e9)
        if "managed_discard_page_ns" not in got or \
                abs(float(got["managed_discard_page_ns"]) - discard) > 0.05 * discard:
            problems.append(f"managed_discard_page_ns {got.get('managed_discard_page_ns')!r}, the "
                            f"model's {discard:.0f}")
        # simgpu's default: one cuMemUnmap may span several mappings.
        if got.get("vmm_unmap_spans_mappings") != "1":
            problems.append(f"vmm_unmap_spans_mappings {got.get('vmm_unmap_spans_mappings')!r}, "
                            "want '1' (gpu_facts run16_handles_ranged passed)")
        # simgpu's default: a ready copy runs beside one that waits (copy_beside_blocked).
        if got.get("copy_engines_serve_ready") != "1":
            problems.append(f"copy_engines_serve_ready {got.get('copy_engines_serve_ready')!r}, "
                            "want '1'")
        if problems:
            print("FAIL: round trip:\n  " + "\n  ".join(problems))
            return 1
        print(f"round trip: {got['name']}, bandwidths {float(got['h2d_pinned_bandwidth']):.4g} / "
              f"{float(got['d2h_pinned_bandwidth']):.4g} B/s against {float(want['h2d_pinned_bandwidth']):.4g} / "
              f"{float(want['d2h_pinned_bandwidth']):.4g}")
        # A driver that unmaps one mapping per call, copy engines that serve copies in
        # issue order: the model says so.
        strict = subprocess.run([str(args.facts_exe), "--mib", "64", "--reps", "3", "--vmm-iters", "5"],
                                env={**env, "SIMGPU_VMM_UNMAP_SPANS": "0", "SIMGPU_COPY_GAPS": "0"},
                                capture_output=True, text=True, timeout=300)
        strict_path = facts_path.with_suffix(".strict.json")
        strict_path.write_text(strict.stdout)
        try:
            model = subprocess.run([sys.executable, str(CALIBRATE), str(strict_path), str(base)],
                                   capture_output=True, text=True, timeout=60)
        finally:
            strict_path.unlink(missing_ok=True)
        strict_keys = keys(model.stdout)
        if strict.returncode != 0 or strict_keys.get("vmm_unmap_spans_mappings") != "0" or \
                strict_keys.get("copy_engines_serve_ready") != "0":
            print(f"FAIL: with SIMGPU_VMM_UNMAP_SPANS=0 SIMGPU_COPY_GAPS=0: gpu_facts exit "
                  f"{strict.returncode}, vmm_unmap_spans_mappings "
                  f"{strict_keys.get('vmm_unmap_spans_mappings')!r}, copy_engines_serve_ready "
                  f"{strict_keys.get('copy_engines_serve_ready')!r}, want '0' and '0'; "
                  f"{model.stderr[-300:]}")
            return 1
        print("a driver that unmaps one mapping a call: vmm_unmap_spans_mappings = 0; copies in "
              "issue order: copy_engines_serve_ready = 0")
        # 2. A missing field.
        del facts["pinned_bandwidth"]["d2h_gbps"]
        facts_path.write_text(json.dumps(facts))
        bad = subprocess.run([sys.executable, str(CALIBRATE), str(facts_path), str(base)],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode != 1 or bad.stdout or "'pinned_bandwidth.d2h_gbps'" not in bad.stderr:
            print(f"FAIL: a facts file without pinned_bandwidth.d2h_gbps: exit {bad.returncode}, "
                  f"stdout {len(bad.stdout)} bytes, stderr {bad.stderr!r}")
            return 1
        print(f"refused: {bad.stderr.strip()}")
    finally:
        facts_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
