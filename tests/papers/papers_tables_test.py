#!/usr/bin/env python3
"""Test of scripts/papers-tables (the papers' tables, issue 8) in its --quick mode.

Runs the script on tiny traces (tiny-cnn, resnet50..56 at batch 1, one device model,
the replay on simgpu under the library) and checks that

  - every markdown table is well formed (a header, a separator, rows of the header's
    width) and every section is there;
  - the figures are consistent with each other: overheads are iteration / unlimited - 1,
    schedules stay within their capacity, "fits" means the peak live bytes fit, the
    largest trainable batch is the largest one with a schedule, the bisection's deepest
    ResNet trains and one block deeper does not (from the probes it made), Layrub's
    saving is 1 - peak device / peak live and the average their mean, the replay's ratio
    is replay / simulator;
  - the markdown shows the JSON's figures (the average saving, the replay ratios).

The checker is run once more on a tampered copy of the output (a cell dropped, the
average saving changed, a ratio changed): it must find each fault, so the test can fail.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

POLICIES = ["cost", "vdnn-all", "lru", "um-naive"]
SECTIONS = ["### vDNN", "### AccUDNN", "### SuperNeurons", "### Layrub",
            "### The simulator against the replay"]


def tables(md: str) -> list[list[list[str]]]:
    """Every markdown table as rows of cells (the separator row dropped)."""
    out, cur = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            out.append(cur)
            cur = []
    return out


def close(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def check(md: str, data: dict) -> list[str]:
    bad: list[str] = []
    for s in SECTIONS:
        if s not in md:
            bad.append(f"section '{s}' missing")
    ts = tables(md)
    if len(ts) < 5:
        bad.append(f"{len(ts)} tables, want at least 5")
    for t in ts:
        if len(t) < 3 or not all(re.fullmatch(r"-+", c) for c in t[1]):
            bad.append(f"table without separator or rows: {t[:2]}")
            continue
        for row in t[2:]:
            if len(row) != len(t[0]):
                bad.append(f"row of {len(row)} cells under a header of {len(t[0])}: {row}")

    def check_point(p: dict, where: str, cap: int, peak: int) -> None:
        if p["capacity_bytes"] != cap:
            bad.append(f"{where}: capacity {p['capacity_bytes']} != {cap}")
        if p["fits"] != (peak <= cap):
            bad.append(f"{where}: fits={p['fits']} with peak {peak} and capacity {cap}")
        if not p["ok"]:
            return
        if not close(p["overhead"], p["iteration_ns"] / p["unlimited_iteration_ns"] - 1, 1e-4) \
                and abs(p["overhead"] - (p["iteration_ns"] / p["unlimited_iteration_ns"] - 1)) > 1e-5:
            bad.append(f"{where}: overhead {p['overhead']} is not iteration / unlimited - 1")
        if p["peak_device_bytes"] > cap:
            bad.append(f"{where}: peak device {p['peak_device_bytes']} over capacity {cap}")
        if p["overhead"] < -1e-9:
            bad.append(f"{where}: negative overhead")

    for r in data["vdnn"]:
        for pol in POLICIES:
            check_point(r["policies"][pol], f"vdnn {r['device']} {pol}", r["capacity_bytes"],
                        r["peak_live_bytes"])
    for s in data["accudnn"]:
        cap = s["capacity_bytes"]
        for r in s["rows"]:
            for pol in POLICIES:
                check_point(r["policies"][pol], f"accudnn b{r['batch']} {pol}", cap,
                            r["peak_live_bytes"])
                if r["policies"][pol]["ok"] != (r["largest_launch_bytes"] <= cap):
                    bad.append(f"accudnn b{r['batch']} {pol}: a schedule exists iff the "
                               f"largest launch fits")
        want = max((r["batch"] for r in s["rows"] if r["peak_live_bytes"] <= cap), default=None)
        if s["largest"]["none"] != want:
            bad.append(f"accudnn: largest batch without oversub {s['largest']['none']} != {want}")
        for pol in POLICIES:
            want_p = max((r["batch"] for r in s["rows"] if r["policies"][pol]["ok"]), default=None)
            if s["largest"][pol] != want_p:
                bad.append(f"accudnn: largest batch under {pol} {s['largest'][pol]} != {want_p}")
            if want is not None and (want_p is None or want_p < want):
                bad.append(f"accudnn: {pol} trains a smaller batch than no oversub")
        if s["tuner_choice"] is not None:
            rates = {r["batch"]: r["samples_per_s"] for r in s["tuner_rows"] if r["ok"]}
            if rates[s["tuner_choice"]] < max(rates.values()) - 1e-9:
                bad.append("accudnn: the tuner's choice is not the fastest batch")
    for s in data["superneurons"]:
        cap = s["capacity_bytes"]
        probes = {int(d): p for d, p in s["probes"].items()}
        for pol, e in s["found"].items():
            if e["blocks"] is None:
                continue
            d = e["depth"]
            fits = (lambda p: p["peak_live_bytes"] <= cap) if pol == "none" else \
                (lambda p, pol=pol: p["ok"][pol])
            if d not in probes or not fits(probes[d]):
                bad.append(f"superneurons {pol}: ResNet-{d} was not seen to train")
            if e["at_least"]:
                if d != s["max_depth"]:
                    bad.append(f"superneurons {pol}: 'at least' below the maximum depth")
            elif d + 3 not in probes or fits(probes[d + 3]):
                bad.append(f"superneurons {pol}: ResNet-{d + 3} was not seen to fail")
            if pol != "none" and s["found"]["none"]["depth"] and d < s["found"]["none"]["depth"]:
                bad.append(f"superneurons: {pol} trains less deep than no oversub")
        depths = sorted(probes)
        peaks = [probes[d]["peak_live_bytes"] for d in depths]
        if peaks != sorted(peaks):
            bad.append("superneurons: peak live bytes do not grow with depth")
    for s in data["layrub"]:
        for r in s["rows"]:
            if not close(r["saving"], 1 - r["peak_device_bytes"] / r["peak_live_bytes"]):
                bad.append(f"layrub {r['profile']}: saving is not 1 - peak device / peak live")
            if r["overhead"] > s["budget"] + 1e-9:
                bad.append(f"layrub {r['profile']}: overhead over the budget")
            if r["capacity_bytes"] and r["peak_device_bytes"] > r["capacity_bytes"]:
                bad.append(f"layrub {r['profile']}: peak device over its capacity")
        avg = sum(r["saving"] for r in s["rows"]) / len(s["rows"])
        if not close(avg, s["average_saving"]):
            bad.append("layrub: the average is not the rows' mean")
        if f"Average saving: {100 * s['average_saving']:.1f}%" not in md:
            bad.append("layrub: the markdown's average saving is not the JSON's")
    for s in data["agreement"]:
        for r in s["rows"]:
            if not close(r["swap_ratio"], r["replay_swap_ns"] / r["sim_cost_ns"]):
                bad.append(f"agreement {r['profile']}: ratio is not replay / simulator")
            if not r["same_data"]:
                bad.append(f"agreement {r['profile']}: the swap replay verified other buffers")
            if f"| {r['swap_ratio']:.3f} |" not in md:
                bad.append(f"agreement {r['profile']}: ratio {r['swap_ratio']:.3f} not shown")
            if not close(r["pages_ratio"], r["replay_swap_ns"] / r["sim_pages_ns"]):
                bad.append(f"agreement {r['profile']}: page ratio is not replay / simulator")
            if f"| {r['sim_pages_ns'] / 1e6:.2f} ({r['pages_ratio']:.3f}) |" not in md:
                bad.append(f"agreement {r['profile']}: page ratio {r['pages_ratio']:.3f} not shown")
            # Pages move whole: never fewer bytes than the buffers they hold.
            if r["sim_pages_h2d_bytes"] < r["sim_h2d_bytes"]:
                bad.append(f"agreement {r['profile']}: fewer bytes over pages than buffers")
        if s["within_5pct"] != all(abs(r["swap_ratio"] - 1) <= 0.05 for r in s["rows"]):
            bad.append("agreement: within_5pct disagrees with the rows")
        if s["pages_within_5pct"] != all(abs(r["pages_ratio"] - 1) <= 0.05 for r in s["rows"]):
            bad.append("agreement: pages_within_5pct disagrees with the rows")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", type=Path, required=True)
    ap.add_argument("--build", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="papers-test-") as tmp_name:
        tmp = Path(tmp_name)
        md_path, js_path = tmp / "out.md", tmp / "out.json"
        cmd = [sys.executable, str(args.script), "--quick", "--build", str(args.build),
               "--scratch", str(tmp / "scratch"), "--out", str(md_path), "--json", str(js_path)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        print(r.stderr, end="")
        if r.returncode != 0 or not md_path.is_file():
            print(f"FAIL: {' '.join(cmd)} exit {r.returncode}\n{r.stdout}")
            return 1
        md, data = md_path.read_text(), json.loads(js_path.read_text())
    print(md)
    problems = check(md, data)
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    if not (data["vdnn"] and data["accudnn"] and data["superneurons"] and data["layrub"]
            and data["agreement"]):
        print("FAIL: a section has no data")
        return 1

    # The checker must see faults: each tampering alone has to be reported.
    first_row = next(l for l in md.splitlines() if l.startswith("| ") and "---" not in l
                     and not l.startswith("| device"))
    avg = data["layrub"][0]["average_saving"]
    ratio = data["agreement"][0]["rows"][0]["swap_ratio"]
    tampered_data = copy.deepcopy(data)
    tampered_data["layrub"][0]["rows"][0]["saving"] += 0.1
    tampered_deep = copy.deepcopy(data)
    found = tampered_deep["superneurons"][0]["found"]["none"]
    found["depth"] = (found["depth"] or 0) + 3
    faults = {
        "a cell dropped": (md.replace(first_row, first_row.rsplit("|", 2)[0] + "|", 1), data),
        "average changed": (md.replace(f"Average saving: {100 * avg:.1f}%",
                                       f"Average saving: {100 * avg + 5:.1f}%"), data),
        "ratio changed": (md.replace(f"| {ratio:.3f} |", f"| {ratio + 0.5:.3f} |"), data),
        "saving not 1 - peak/live": (md, tampered_data),
        "deepest one block too deep": (md, tampered_deep),
    }
    for name, (m, d) in faults.items():
        if not check(m, d):
            print(f"FAIL: the checker missed the fault '{name}'")
            return 1
    print("ok: papers-tables --quick is well formed and consistent; the checker finds "
          f"{len(faults)} planted faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
