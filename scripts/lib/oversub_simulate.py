"""`oversub simulate` and `oversub tune-batch`: the what-if simulator (the C++
program tools/oversub-simulate, built with the repository) driven from the CLI.

  simulate model.oprof [--device h100-pcie] [--capacity 12GiB] [--policy cost|...|all]
           [--sweep [N] | --capacities A,B,...] [--out PREFIX] [--json]
  tune-batch a.oprof b.oprof ... --budget 12GiB [--device ...] [--batch 32,64,...] [--json]

Everything the simulator computes (peak bytes, bytes moved, times) comes from the
C++ program's --json output; this module formats it: the sweep's markdown and CSV
tables and its PNG (overhead against capacity, one curve per policy), and the
tuner's table and choice. Profiles ending in .gz are decompressed to a temporary
file first (the C++ reader takes plain files). docs/simulate.md.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from png_plot import Canvas, _fmt_bytes, log_ratio_axes

SIMULATOR = "oversub-simulate"
POLICIES = ["cost", "vdnn-all", "lru", "um-naive"]
COLORS = {"cost": (31, 119, 180), "vdnn-all": (255, 127, 14), "lru": (44, 160, 44),
          "um-naive": (214, 39, 40)}


def find_simulator(repo: Path, explicit: Path | None) -> Path | None:
    """--simulator, else $OVERSUB_SIMULATOR, else the newest build*/tools/oversub-simulate."""
    if explicit is None and os.environ.get("OVERSUB_SIMULATOR"):
        explicit = Path(os.environ["OVERSUB_SIMULATOR"])
    if explicit is not None:
        return explicit.resolve() if explicit.is_file() else None
    found = [p for p in repo.glob(f"build*/tools/{SIMULATOR}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime).resolve() if found else None


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


def fmt_ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


class SimulatorError(Exception):
    """The simulator refused (a profile, a device, an option); str() is its message,
    status the exit status to pass on (2 for a usage error, else 1)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def plain_profile(path: Path, tmp: Path) -> Path:
    """path itself, or for a .gz profile its decompressed copy under tmp."""
    if not str(path).endswith(".gz"):
        return path
    out = tmp / path.name[:-3]
    try:
        out.write_bytes(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise SimulatorError(f"{path}: cannot decompress: {e}") from None
    return out


def run_simulator(tool: Path, profile: Path, options: list[str]) -> dict:
    """The simulator's JSON for one profile. A run where no point has a schedule
    (exit 1 with JSON) is returned too; anything else that fails raises."""
    with tempfile.TemporaryDirectory(prefix="oversub-sim-") as tmp:
        plain = plain_profile(profile, Path(tmp))
        r = subprocess.run([str(tool), str(plain), *options, "--json"], capture_output=True,
                           text=True)
    if r.returncode in (0, 1) and r.stdout.strip():
        result = json.loads(r.stdout)
        result["profile"] = str(profile)
        return result
    message = r.stderr.strip().splitlines()[0] if r.stderr.strip() else f"exit {r.returncode}"
    raise SimulatorError(message.replace(str(plain), str(profile)),
                         2 if r.returncode == 2 else 1)


def tool_options(args: argparse.Namespace) -> list[str]:
    opts = ["--device", args.device, "--durations", args.durations]
    if getattr(args, "granularity", "buffer") != "buffer":
        opts += ["--granularity", args.granularity]
    if args.device_dir:
        opts += ["--device-dir", str(args.device_dir)]
    return opts


# ---- simulate ---------------------------------------------------------------------

def sweep_rows(result: dict) -> list[dict]:
    rows = []
    for p in result["points"]:
        rows.append({
            "capacity_bytes": p["capacity_bytes"], "policy": p["policy"],
            "iteration_ns": p["iteration_ns"] if p["ok"] else "",
            "unlimited_iteration_ns": p["unlimited_iteration_ns"],
            "transfer_bound_ns": p["transfer_bound_ns"],
            "window_bound_ns": p["window_bound_ns"],
            "overhead_percent": f"{100 * p['overhead']:.2f}" if p["ok"] else "",
            "h2d_bytes": p["h2d_bytes"] if p["ok"] else "",
            "d2h_bytes": p["d2h_bytes"] if p["ok"] else "",
            "peak_device_bytes": p["peak_device_bytes"] if p["ok"] else "",
            "note": ("peak live fits" if p["fits"] else "") if p["ok"] else "no schedule: " + p["error"],
        })
    return rows


def unreadable_line(result: dict) -> str:
    """What the simulator assumed for the launches whose parameter layout the profiler
    could not read (Note [Profile to iteration model] in policy/profile_model.h)."""
    return (f"{result['profile']}: {result['unreadable_launches']} of {result['launches']} "
            "launches unreadable (parameter layout not read): each taken to use every buffer "
            "live at it")


def sweep_markdown(result: dict) -> str:
    head = (f"{result['profile']} on {result['device']['name']}: peak live "
            f"{fmt_bytes(result['peak_live_bytes'])}, largest launch "
            f"{fmt_bytes(result['largest_launch']['bytes'])}, unlimited "
            f"{fmt_ms(result['unlimited_iteration_ns'])} ms per iteration" +
            (f"; planned over {result['pages']} pages of {fmt_bytes(result['page_bytes'])}"
             if result.get("granularity") == "page" else "") + "\n" +
            (unreadable_line(result) + "\n" if result.get("unreadable_launches") else "") +
            "\n")
    lines = ["| capacity | policy | iteration ms | overhead | transfer bound ms | window bound ms | "
             "to device | to host | peak device | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sweep_rows(result):
        ok = r["iteration_ns"] != ""
        lines.append("| " + " | ".join([
            fmt_bytes(r["capacity_bytes"]), r["policy"],
            fmt_ms(r["iteration_ns"]) if ok else "", f"+{r['overhead_percent']}%" if ok else "",
            fmt_ms(r["transfer_bound_ns"]), fmt_ms(r["window_bound_ns"]),
            fmt_bytes(r["h2d_bytes"]) if ok else "",
            fmt_bytes(r["d2h_bytes"]) if ok else "",
            fmt_bytes(r["peak_device_bytes"]) if ok else "", r["note"]]) + " |")
    return head + "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["capacity_bytes"])
        w.writeheader()
        w.writerows(rows)


def plot_overhead(path: Path, result: dict, title: str) -> None:
    """Overhead (iteration time / unlimited, log scale) against capacity, one curve per
    policy; points without a schedule are left out."""
    w, h = 960, 540
    left, right, top, bottom = 110, 190, 50, 70
    c = Canvas(w, h)
    series: dict[str, list[tuple[int, float]]] = {}
    for p in result["points"]:
        if p["ok"]:
            series.setdefault(p["policy"], []).append(
                (p["capacity_bytes"], p["iteration_ns"] / max(p["unlimited_iteration_ns"], 1)))
    caps = [p["capacity_bytes"] for p in result["points"]]
    xmin, xmax = min(caps), max(caps)
    if xmax == xmin:
        xmin, xmax = xmin * 0.9, xmax * 1.1 + 1
    slow = [s for pts in series.values() for _, s in pts] or [1.0]
    ymax_log = max(math.log10(max(slow)) * 1.05, math.log10(2.0))
    ticks = [m * 10 ** e for e in range(0, int(ymax_log) + 2) for m in (1, 2, 5)]
    px, py = log_ratio_axes(c, (left, right, top, bottom), xmin, xmax, ymax_log, ticks,
                            lambda s: f"+{round((s - 1) * 100)}%")
    for i, name in enumerate(POLICIES):
        pts = sorted(series.get(name, []))
        color = COLORS[name]
        for (x0, s0), (x1, s1) in zip(pts, pts[1:]):
            c.line(px(x0), py(s0), px(x1), py(s1), color, 2)
        for x, s in pts:
            c.rect(px(x) - 3, py(s) - 3, px(x) + 3, py(s) + 3, color)
        c.rect(w - right + 20, top + 20 + 24 * i, w - right + 40, top + 30 + 24 * i, color)
        c.text(w - right + 48, top + 20 + 24 * i, name if pts else name + " (none)", color)
    c.text(left, 14, title)
    c.text(w // 2 - Canvas.text_width("device capacity") // 2, h - 30, "device capacity")
    c.text(8, top - 18, "overhead against unlimited memory (log scale)")
    c.save(path)


def command_simulate(args: argparse.Namespace, repo: Path) -> int:
    tool = find_simulator(repo, args.simulator)
    if tool is None:
        print(f"oversub simulate: {SIMULATOR} not found in {repo}/build*/tools/; build it first "
              f"(meson setup build && ninja -C build) or pass --simulator", file=sys.stderr)
        return 2
    opts = tool_options(args) + ["--policy", args.policy]
    many = args.sweep is not None or (args.capacities and "," in args.capacities)
    if args.sweep is not None and args.capacities:
        print("oversub simulate: --sweep and --capacities exclude each other", file=sys.stderr)
        return 2
    if args.capacities:
        opts += ["--capacities", args.capacities]
    elif args.sweep is not None:
        opts += ["--sweep", str(args.sweep)]
    elif args.capacity:
        opts += ["--capacity", args.capacity]
    if not many:
        with tempfile.TemporaryDirectory(prefix="oversub-sim-") as tmp:
            try:
                plain = plain_profile(args.profile, Path(tmp))
            except SimulatorError as e:
                print(f"oversub simulate: {e}", file=sys.stderr)
                return 1
            r = subprocess.run([str(tool), str(plain), *opts] + (["--json"] if args.json else []),
                               capture_output=True, text=True)
            sys.stdout.write(r.stdout.replace(str(plain), str(args.profile)))
            sys.stderr.write(r.stderr.replace(str(plain), str(args.profile)))
            return r.returncode
    try:
        result = run_simulator(tool, args.profile, opts)
    except SimulatorError as e:
        print(e, file=sys.stderr)
        return e.status
    stem = re.sub(r"(\.oprof)?(\.gz)?$", "", args.profile.name)
    prefix = args.out if args.out is not None else Path(f"{stem}-sweep")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    md, csv_path, png = (prefix.with_name(prefix.name + ext) for ext in (".md", ".csv", ".png"))
    table = sweep_markdown(result)
    md.write_text(table)
    write_csv(csv_path, sweep_rows(result))
    plot_overhead(png, result, f"{stem} on {result['device']['name']}: overhead against capacity")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(table, end="")
        print(f"\nwrote {md}, {csv_path} and {png}")
    return 0 if any(p["ok"] for p in result["points"]) else 1


# ---- tune-batch -------------------------------------------------------------------

BATCH_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:batch|bs|b)[-_=]?(\d+)(?![0-9])", re.IGNORECASE)


def batch_from_name(path: Path) -> int | None:
    """The batch size in a profile's file name: the last `b64`, `bs64`, `batch64`,
    `batch-64` or `batch_64` that starts the name or follows a non-alphanumeric
    character (vgg16-b64.oprof, resnet152_batch128.oprof.gz)."""
    stem = re.sub(r"(\.oprof)?(\.gz)?$", "", path.name)
    found = BATCH_IN_NAME.findall(stem)
    return int(found[-1]) if found else None


def tune_rows(results: list[tuple[int, dict]]) -> list[dict]:
    rows = []
    for batch, res in results:
        p = res["points"][0]
        row = {"batch": batch, "profile": res["profile"], "peak_live_bytes": res["peak_live_bytes"],
               "largest_launch_bytes": res["largest_launch"]["bytes"], "ok": p["ok"],
               "fits": p["fits"], "unlimited_iteration_ns": p["unlimited_iteration_ns"],
               "unreadable_launches": res.get("unreadable_launches", 0)}
        if p["ok"]:
            row.update(iteration_ns=p["iteration_ns"], overhead=p["overhead"],
                       h2d_bytes=p["h2d_bytes"], d2h_bytes=p["d2h_bytes"],
                       samples_per_s=batch * 1e9 / p["iteration_ns"] if p["iteration_ns"] else 0.0)
        else:
            row.update(iteration_ns=None, overhead=None, samples_per_s=0.0, error=p["error"])
        rows.append(row)
    return rows


def choose(rows: list[dict]) -> dict | None:
    """The runnable row with the most samples per second (the smaller peak on a tie)."""
    runnable = [r for r in rows if r["ok"]]
    if not runnable:
        return None
    return max(runnable, key=lambda r: (r["samples_per_s"], -r["peak_live_bytes"]))


def fits_text(row: dict) -> str:
    if not row["ok"]:
        return "no: a launch needs more than the budget"
    return "yes" if row["fits"] else "swaps"


def command_tune_batch(args: argparse.Namespace, repo: Path) -> int:
    tool = find_simulator(repo, args.simulator)
    if tool is None:
        print(f"oversub tune-batch: {SIMULATOR} not found in {repo}/build*/tools/; build it "
              "first or pass --simulator", file=sys.stderr)
        return 2
    if args.batch:
        try:
            batches = [int(b) for b in args.batch.split(",")]
        except ValueError:
            print(f"oversub tune-batch: --batch '{args.batch}' is not a list of integers",
                  file=sys.stderr)
            return 2
        if len(batches) != len(args.profiles):
            print(f"oversub tune-batch: --batch gives {len(batches)} sizes for "
                  f"{len(args.profiles)} profiles", file=sys.stderr)
            return 2
    else:
        batches = []
        for p in args.profiles:
            b = batch_from_name(p)
            if b is None:
                print(f"oversub tune-batch: no batch size in the name {p.name} (name it like "
                      "model-b64.oprof or pass --batch 32,64,...)", file=sys.stderr)
                return 2
            batches.append(b)
    if any(b <= 0 for b in batches):
        print("oversub tune-batch: batch sizes must be positive", file=sys.stderr)
        return 2
    opts = tool_options(args) + ["--capacity", args.budget, "--policy", args.policy]
    results = []
    for batch, profile in zip(batches, args.profiles):
        try:
            results.append((batch, run_simulator(tool, profile, opts)))
        except SimulatorError as e:
            print(f"oversub tune-batch: {e}", file=sys.stderr)
            return e.status
    rows = sorted(tune_rows(results), key=lambda r: r["batch"])
    best = choose(rows)
    budget = results[0][1]["points"][0]["capacity_bytes"]
    if args.json:
        print(json.dumps({"budget_bytes": budget, "device": results[0][1]["device"],
                          "policy": args.policy, "rows": rows,
                          "choice": best["batch"] if best else None}, indent=2))
        return 0 if best else 1
    print(f"budget {fmt_bytes(budget)} on {results[0][1]['device']['name']}, policy {args.policy}\n")
    print("| batch | peak live | iteration ms | unlimited ms | overhead | samples/s | fits? |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ok = r["ok"]
        iteration = fmt_ms(r["iteration_ns"]) if ok else ""
        overhead = f"+{100 * r['overhead']:.1f}%" if ok else ""
        rate = f"{r['samples_per_s']:.1f}" if ok else "0"
        print(f"| {r['batch']} | {fmt_bytes(r['peak_live_bytes'])} | {iteration} | "
              f"{fmt_ms(r['unlimited_iteration_ns'])} | {overhead} | {rate} | {fits_text(r)} |")
    unreadable = [unreadable_line(res) for _, res in results if res.get("unreadable_launches")]
    if unreadable:
        print("\n" + "\n".join(unreadable))
    if best is None:
        print("\nno batch size runs in this budget (each has a launch larger than it)")
        return 1
    print(f"\nchoice: batch {best['batch']}, {best['samples_per_s']:.1f} samples/s "
          f"({'fits' if best['fits'] else 'swapping, +' + format(100 * best['overhead'], '.1f') + '%'})")
    return 0


# ---- argument parsers -------------------------------------------------------------

def device_arguments(p: argparse.ArgumentParser) -> None:
    """--device and --device-dir, as every command that runs the simulator takes them."""
    p.add_argument("--device", default="h100-pcie",
                   help="device model: a name in tests/simgpu/devices (h100-pcie, a100, "
                        "titanx-maxwell, k40) or a .model file (default: h100-pcie)")
    p.add_argument("--device-dir", type=Path, metavar="DIR",
                   help="where device model names are looked up")


def _common(p: argparse.ArgumentParser) -> None:
    device_arguments(p)
    p.add_argument("--durations", choices=["auto", "model"], default="auto",
                   help="auto: the profile's measured kernel durations, modeled where 0; "
                        "model: every duration modeled on the device (docs/simulate.md)")
    p.add_argument("--granularity", choices=["buffer", "page"], default="buffer",
                   help="buffer: plan the profile's buffers; page: the arena's 2 MiB pages, "
                        "as the library's swap mode moves them (docs/simulate.md)")
    p.add_argument("--simulator", type=Path, metavar="PATH",
                   help=f"the {SIMULATOR} program (default: newest build*/tools/)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_parsers(sub: argparse._SubParsersAction, repo: Path) -> None:
    sim = sub.add_parser("simulate", help="what-if: a profile on a device with a given capacity",
                         description="Plan and replay a profile's iteration in virtual time on a "
                                     "device model: peak device bytes, bytes moved, iteration "
                                     "time, overhead against unlimited memory (docs/simulate.md).")
    sim.add_argument("profile", type=Path)
    _common(sim)
    sim.add_argument("--capacity", metavar="SIZE",
                     help="device bytes for the iteration: 12GiB, 512MiB, 1.5GB, bytes "
                          "(default: the device model's memory)")
    sim.add_argument("--policy", default="cost", choices=POLICIES + ["all"],
                     help="residency policy, or all to compare them (default: cost)")
    sim.add_argument("--sweep", type=int, nargs="?", const=8, metavar="N",
                     help="N capacities from peak live down to the largest launch (default 8); "
                          "writes PREFIX.md, PREFIX.csv and PREFIX.png")
    sim.add_argument("--capacities", metavar="A,B,...",
                     help="sweep over these capacities instead")
    sim.add_argument("--out", type=Path, metavar="PREFIX",
                     help="where the sweep's files go (default: ./<profile stem>-sweep)")
    sim.set_defaults(func=lambda a: command_simulate(a, repo))
    tune = sub.add_parser("tune-batch", help="the batch size with the most samples/s in a budget",
                          description="Simulate a model traced at several batch sizes under a "
                                      "memory budget and pick the batch size with the most "
                                      "samples per second (docs/simulate.md).")
    tune.add_argument("profiles", type=Path, nargs="+", help="one profile per batch size")
    tune.add_argument("--budget", required=True, metavar="SIZE", help="device memory budget")
    _common(tune)
    tune.add_argument("--batch", metavar="B1,B2,...",
                      help="the profiles' batch sizes in order (default: from the file names, "
                           "e.g. model-b64.oprof)")
    tune.add_argument("--policy", default="cost", choices=POLICIES,
                      help="residency policy (default: cost)")
    tune.set_defaults(func=lambda a: command_tune_batch(a, repo))
