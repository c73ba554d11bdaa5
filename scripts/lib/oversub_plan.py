"""`oversub plan`: one answer to "will my model fit on this GPU, and how slow?".

  plan A.oprof [B.oprof ...] [--device h100-pcie] [--memory SIZE] [--host-memory SIZE]
       [--batch B1,B2,...] [--png PATH] [--json]

For each profile, from the what-if simulator (tools/oversub-simulate, driven through
oversub_simulate.run_simulator; nothing here simulates): the peak of live bytes and
whether it fits the device without oversub; the iteration under swap mode at the
device's memory (the cost policy over the arena's 2 MiB pages, as `oversub simulate
--granularity page` predicts it); the bytes moved and the host memory that takes;
the smallest device memory within 1.1x, 1.5x and 2x of the iteration with enough
memory (See Note [Plan search]); and, for one model at several batch sizes, the batch
with the most samples per second (oversub_simulate.tune_rows and choose, as
`oversub tune-batch` picks). A table on stdout, a PNG of slowdown against device
memory, or one JSON object. docs/guide/simulate.md.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from oversub_simulate import (SIMULATOR, SimulatorError, batch_from_name, choose, device_arguments,
                              find_simulator, fmt_bytes, run_simulator, tune_rows)
from png_plot import Canvas, _fmt_bytes, log_ratio_axes

GiB = 1 << 30
PAGE = 2 << 20  # the arena's page
TARGETS = (1.1, 1.5, 2.0)
GRID_POINTS = 8
MIN_PAGES = 4  # the least capacity searched (Note [Plan search])
REFINE_ROUNDS = 2
SIZE_FORMS = "a size such as 512GiB, 64GB, 1.5TiB or a byte count"
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}

# Note [Plan search]
# ~~~~~~~~~~~~~~~~~~
# The smallest device memory within a slowdown X of unlimited is searched for, not
# solved: the simulator is run on GRID_POINTS capacities evenly spaced from MIN_PAGES
# pages (swap runs a launch over the capacity with part of its memory in host memory,
# see Note [Launches over the room] in policy/iteration_model.h) to the profile's paged
# bytes plus the schedule's headroom (1/32, Note [Headroom] in policy/schedule.h),
# where nothing need move. The smallest grid capacity within X and the grid capacity
# below it bracket the answer;
# REFINE_ROUNDS rounds of three capacities inside each bracket (all targets' probes in
# one simulator run per round) narrow it to 1/16 of a grid step, in whole 2 MiB pages.
# The answer is the smallest capacity seen within X. The simulated time is not exactly
# monotone in the capacity (a schedule a page larger can order its copies worse), so
# a capacity somewhat below the answer may happen to be within X as well; above it the
# grid found none worse than X below the bracket's top.


def parse_size(text: str) -> int:
    """Bytes of a size: 512GiB, 64GB, 1.5TiB, a byte count (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"'{text}' is not a size ({SIZE_FORMS})")
    n = int(float(m.group(1)) * UNITS[(m.group(2) or "").upper()])
    if n <= 0:
        raise ValueError(f"'{text}' is not a size above 0")
    return n


def physical_memory() -> int | None:
    """MemTotal of /proc/meminfo in bytes, None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def swap_capacity(memory: int) -> int:
    """What swap mode's pages may hold on a device of `memory` bytes without
    OVERSUB_DEVICE_LIMIT: the library keeps 1/16 of it (at most 1 GiB) back for what
    others allocate later, in whole pages (Note [Swap capacity] in core/device_pool.cc;
    there it is taken from the free memory at start, which the CUDA context has
    already lessened)."""
    return (memory - min(memory // 16, GiB)) // PAGE * PAGE


def memory_for_capacity(capacity: int) -> int:
    """The smallest device memory whose swap_capacity holds `capacity`."""
    lo, hi = capacity, 2 * capacity + 2 * GiB   # swap_capacity(hi) >= capacity
    while lo < hi:
        mid = (lo + hi) // 2
        if swap_capacity(mid) >= capacity:
            hi = mid
        else:
            lo = mid + 1
    return lo


def model_stem(path: Path) -> str:
    """The file name without its batch token and extension: the model it traces."""
    stem = re.sub(r"(\.oprof)?(\.gz)?$", "", path.name)
    return re.sub(r"(?:^|(?<=[^a-z0-9]))(?:batch|bs|b)[-_=]?\d+(?![0-9])", "", stem,
                  flags=re.IGNORECASE)


class Planner:
    """One profile's simulator runs, every probed capacity's slowdown kept."""

    def __init__(self, tool: Path, profile: Path, opts: list[str]) -> None:
        self.tool, self.profile, self.opts = tool, profile, opts
        self.slowdown: dict[int, float | None] = {}   # capacity -> slowdown, None: no schedule
        self.runs = 0

    def run(self, capacities: list[int]) -> dict:
        todo = sorted({c for c in capacities if c not in self.slowdown})
        result = run_simulator(self.tool, self.profile, self.opts + [
            "--capacities", ",".join(str(c) for c in (todo or capacities[:1]))])
        self.runs += 1
        for p in result["points"]:
            self.slowdown[p["capacity_bytes"]] = (
                p["iteration_ns"] / max(p["unlimited_iteration_ns"], 1) if p["ok"] else None)
        return result

    def within(self, capacity: int, target: float) -> bool:
        s = self.slowdown.get(capacity)
        return s is not None and s <= target + 1e-9

    def smallest_within(self, lo: int, hi: int, page: int) -> dict[str, int | None]:
        """Note [Plan search]."""
        def whole(c: float) -> int:
            return max(page, math.ceil(c / page) * page)
        grid = sorted({whole(lo + (hi - lo) * k / (GRID_POINTS - 1)) for k in range(GRID_POINTS)})
        self.run(grid)
        brackets: dict[float, tuple[int, int] | None] = {}
        for t in TARGETS:
            first = next((i for i, c in enumerate(grid) if self.within(c, t)), None)
            brackets[t] = None if first is None else (grid[max(first - 1, 0)], grid[first])
        for _ in range(REFINE_ROUNDS):
            probes = {t: sorted({whole(a + (b - a) * k / 4) for k in (1, 2, 3)} - {a, b})
                      for t, ab in brackets.items() if ab for a, b in [ab] if b - a > page}
            if not any(probes.values()):
                break
            self.run([c for cs in probes.values() for c in cs])
            for t, cs in probes.items():
                a, b = brackets[t]
                ok = [c for c in cs if self.within(c, t)]
                brackets[t] = (max([a] + [c for c in cs if c < ok[0]]), ok[0]) if ok else \
                    (max([a] + cs), b)
        return {f"{t:g}x": (ab[1] if ab else None) for t, ab in brackets.items()}


def plan_one(tool: Path, profile: Path, opts: list[str], memory: int | None,
             host_memory: int) -> dict:
    planner = Planner(tool, profile, opts)
    first = run_simulator(tool, profile, opts + ["--capacity", "1"])  # the summary only
    planner.runs += 1
    device_memory = memory if memory is not None else first["device"]["memory_bytes"]
    cap = swap_capacity(device_memory)
    at_device = planner.run([cap])
    point = next(p for p in at_device["points"] if p["capacity_bytes"] == cap)
    page = first["page_bytes"]
    paged = first["pages"] * page
    peak = first["peak_live_bytes"]
    row = {
        "profile": str(profile), "device_memory_bytes": device_memory,
        "swap_capacity_bytes": cap, "peak_live_bytes": peak, "paged_bytes": paged,
        "largest_launch_bytes": first["largest_launch"]["bytes"],
        "largest_launch": first["largest_launch"]["launch"],
        "unreadable_launches": first.get("unreadable_launches", 0),
        "fits_without_oversub": peak <= device_memory,
        "unlimited_iteration_ns": first["unlimited_iteration_ns"],
        # At page granularity the simulator's "buffers" of a launch are its pages.
        "runs": point["ok"],
        "why_not": "" if point["ok"] else point["error"].replace(" buffers, more than",
                                                                 " pages, more than"),
        "iteration_ns": None, "slowdown": None, "h2d_bytes": None, "d2h_bytes": None,
        "moved_bytes": None, "host_bytes_needed": None, "host_bytes_up_to": None,
        # Launches over what swap holds, and the bytes they read in host memory (Note
        # [Launches over the room] in policy/iteration_model.h).
        "over_room_launches": point.get("over_room_launches", 0),
        "host_access_bytes": point.get("host_access_bytes", 0),
    }
    if point["ok"]:
        moved = point["h2d_bytes"] + point["d2h_bytes"]
        # At the iteration's peak every live page not on the device is on the host;
        # each page ever evicted keeps its host copy (Note [Host handle as the host
        # copy] in residency/swap_engine.h), so the host may hold up to every page.
        needed = max(0, paged - point["peak_device_bytes"]) if moved else 0
        row.update(iteration_ns=point["iteration_ns"],
                   slowdown=point["iteration_ns"] / max(point["unlimited_iteration_ns"], 1),
                   h2d_bytes=point["h2d_bytes"], d2h_bytes=point["d2h_bytes"], moved_bytes=moved,
                   host_bytes_needed=needed, host_bytes_up_to=paged if moved else 0)
        if needed > host_memory:
            row.update(runs=False, why_not=f"needs at least {fmt_bytes(needed)} on the host, more "
                                           f"than the host memory of {fmt_bytes(host_memory)}")
    hi = math.ceil(paged * 33 / 32) + 2 * page
    caps = planner.smallest_within(MIN_PAGES * page, hi, page)
    row["smallest_capacity_within"] = caps
    row["smallest_memory_within"] = {k: memory_for_capacity(c) if c else None
                                     for k, c in caps.items()}
    row["points"] = [{"capacity_bytes": c, "device_memory_bytes": memory_for_capacity(c),
                      "slowdown": s} for c, s in sorted(planner.slowdown.items())]
    row["simulator_runs"] = planner.runs
    row["device"] = first["device"]
    return row


# ---- output -----------------------------------------------------------------------

def fmt_slow(s: float | None) -> str:
    return "" if s is None else f"{s:.2f}x"


def fits_cell(r: dict) -> str:
    return "yes" if r["fits_without_oversub"] else "no"


def swap_cell(r: dict) -> str:
    if r["iteration_ns"] is None:
        return "cannot run"
    return f"{r['iteration_ns'] / 1e6:.1f} ms ({fmt_slow(r['slowdown'])})"


def table(plan: dict) -> str:
    d = plan["device"]
    mem = plan["device_memory_bytes"]
    host = plan["host_memory_bytes"]
    out = [f"device {d['name']} ({fmt_bytes(mem)}"
           + (", --memory" if plan["memory_given"] else "") + "); swap mode holds "
           f"{fmt_bytes(swap_capacity(mem))} of it (the library keeps 1/16, at most 1 GiB, back); "
           f"host memory {fmt_bytes(host)} ({plan['host_memory_source']})", "",
           "| trace | peak live | fits without oversub? | swap iteration (slowdown) | "
           "moved / iteration | host needed | memory for 1.1x | 1.5x | 2x |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in plan["traces"]:
        sm = r["smallest_memory_within"]
        moved = "" if r["moved_bytes"] is None else fmt_bytes(r["moved_bytes"])
        if r["host_bytes_needed"] is None:
            host_cell = ""
        elif r["host_bytes_needed"] == 0:
            host_cell = "0 B"
        else:
            host_cell = (f"{fmt_bytes(r['host_bytes_needed'])} "
                         f"(up to {fmt_bytes(r['host_bytes_up_to'])})")
        cells = [r["profile"], fmt_bytes(r["peak_live_bytes"]), fits_cell(r), swap_cell(r), moved,
                 host_cell] + [fmt_bytes(sm[k]) if sm[k] else "none" for k in sm]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for r in plan["traces"]:
        if not r["runs"]:
            out.append(f"{r['profile']}: cannot run on this device: {r['why_not']}")
        elif r["host_bytes_up_to"] and r["host_bytes_up_to"] > host // 2:
            out.append(f"{r['profile']}: the host copies may take up to "
                       f"{fmt_bytes(r['host_bytes_up_to'])}, more than OVERSUB_HOST_LIMIT's "
                       f"default (half the host memory); set OVERSUB_HOST_LIMIT higher")
        if r["runs"] and r["over_room_launches"]:
            out.append(f"{r['profile']}: {r['over_room_launches']} launches need more than swap "
                       f"holds (the largest {fmt_bytes(r['largest_launch_bytes'])}): they read "
                       f"{fmt_bytes(r['host_access_bytes'])} in host memory over the link per "
                       "iteration, which is slow; more memory or a smaller batch avoids it")
        if r["unreadable_launches"]:
            out.append(f"{r['profile']}: {r['unreadable_launches']} launches unreadable "
                       "(parameter layout not read): each taken to use every buffer live at it")
    out.append("peak live is the most bytes the trace's allocations hold at once; the CUDA "
               "context, library workspaces and the allocator's fragmentation need device "
               "memory on top of it.")
    out.append("swap iteration: the cost policy over 2 MiB pages in what swap mode holds of the "
               "device; memory for 1.1x/1.5x/2x: the smallest device memory found within that "
               "slowdown of the iteration with enough memory (the library's share kept back "
               "included; OVERSUB_DEVICE_LIMIT=capacity in the JSON).")
    b = plan["batch"]
    if b is not None:
        out.append("")
        out.append("| batch | samples/s at this device's memory |")
        out.append("|---|---|")
        for row in b["rows"]:
            out.append(f"| {row['batch']} | {row['samples_per_s']:.1f} |")
        out.append("")
        out.append(f"best batch: {b['choice']}" if b["choice"] is not None
                   else "best batch: none (no batch size runs on this device)")
    elif plan["batch_note"]:
        out.append(plan["batch_note"])
    return "\n".join(out) + "\n"


PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127)]


def plot(path: Path, plan: dict) -> None:
    """Slowdown against device memory (log scale), one curve per trace, the device's
    memory as a vertical line, 1.1x, 1.5x and 2x as horizontal ones."""
    w, h = 960, 540
    left, right, top, bottom = 90, 250, 50, 70
    c = Canvas(w, h)
    curves = [[(p["device_memory_bytes"], p["slowdown"]) for p in r["points"] if p["slowdown"]]
              for r in plan["traces"]]
    xs = [x for pts in curves for x, _ in pts] + [plan["device_memory_bytes"]]
    xmin, xmax = 0, max(xs) * 1.05
    slow = [s for pts in curves for _, s in pts] or [1.0]
    ymax_log = max(math.log10(max(slow)) * 1.05, math.log10(2.5))
    px, py = log_ratio_axes(c, (left, right, top, bottom), xmin, xmax, ymax_log,
                            [1, 1.1, 1.5, 2, 5, 10, 20, 50, 100], lambda s: f"{s:g}x")
    red = (200, 0, 0)
    dm = px(plan["device_memory_bytes"])
    c.line(dm, top, dm, h - bottom, red)
    c.text(dm + 4, top, "device", red)
    for i, (r, pts) in enumerate(zip(plan["traces"], curves)):
        color = PALETTE[i % len(PALETTE)]
        for (x0, s0), (x1, s1) in zip(pts, pts[1:]):
            c.line(px(x0), py(s0), px(x1), py(s1), color, 2)
        for x, s in pts:
            c.rect(px(x) - 2, py(s) - 2, px(x) + 2, py(s) + 2, color)
        name = re.sub(r"(\.oprof)?(\.gz)?$", "", Path(r["profile"]).name)[:24]
        c.rect(w - right + 15, top + 20 + 24 * i, w - right + 35, top + 30 + 24 * i, color)
        c.text(w - right + 42, top + 20 + 24 * i, name, color)
    c.text(left, 14, f"slowdown under swap against device memory ({plan['device']['name']})")
    c.text(w // 2 - Canvas.text_width("device memory") // 2, h - 30, "device memory")
    c.save(path)


# ---- the command ------------------------------------------------------------------

def command_plan(args: argparse.Namespace, repo: Path) -> int:
    def fail(message: str, status: int = 2) -> int:
        print(f"oversub plan: {message}", file=sys.stderr)
        return status
    tool = find_simulator(repo, args.simulator)
    if tool is None:
        return fail(f"{SIMULATOR} not found in {repo}/build*/tools/; build it first "
                    "(meson setup build && ninja -C build) or pass --simulator")
    for p in args.profiles:
        if not p.is_file():
            return fail(f"{p}: no such profile (give .oprof or .oprof.gz files written by "
                        "oversub profile or oversub trace-torch)")
    sizes: dict[str, int | None] = {}
    for flag, text in (("--memory", args.memory), ("--host-memory", args.host_memory)):
        try:
            sizes[flag] = parse_size(text) if text is not None else None
        except ValueError as e:
            return fail(f"{flag}: {e}")
    memory, host = sizes["--memory"], sizes["--host-memory"]
    source = "--host-memory"
    if host is None:
        host, source = physical_memory(), "this machine's, from /proc/meminfo"
        if host is None:
            return fail("cannot read /proc/meminfo: give --host-memory SIZE")
    opts = ["--device", args.device, "--durations", args.durations, "--granularity", "page",
            "--policy", "cost"]
    if args.device_dir:
        opts += ["--device-dir", str(args.device_dir)]
    rows = []
    for p in args.profiles:
        try:
            rows.append(plan_one(tool, p, opts, memory, host))
        except SimulatorError as e:
            message = str(e).removeprefix("oversub-simulate: ")
            if message.startswith("unknown device"):
                message += "; or give a .model file"
            return fail(message, e.status)
    plan = {"device": rows[0]["device"], "device_memory_bytes": rows[0]["device_memory_bytes"],
            "memory_given": memory is not None,
            "swap_capacity_bytes": rows[0]["swap_capacity_bytes"], "host_memory_bytes": host,
            "host_memory_source": source, "granularity": "page", "policy": "cost",
            "targets": [f"{t:g}x" for t in TARGETS], "traces": rows, "batch": None,
            "batch_note": ""}
    for r in rows:
        del r["device"]
    batches = None
    if args.batch:
        try:
            batches = [int(b) for b in args.batch.split(",")]
        except ValueError:
            return fail(f"--batch '{args.batch}' is not a list of integers")
        if len(batches) != len(rows) or any(b <= 0 for b in batches):
            return fail(f"--batch gives {len(batches)} positive sizes for {len(rows)} profiles")
    elif len(rows) > 1:
        found = [batch_from_name(p) for p in args.profiles]
        stems = {model_stem(p) for p in args.profiles}
        if None in found or len(stems) > 1 or len(set(found)) < len(found):
            plan["batch_note"] = ("no best batch: the traces are not one model at several "
                                  "batch sizes by their names (model-b64.oprof); pass --batch "
                                  "to compare them")
        else:
            batches = found
    if batches is not None and len(rows) > 1:
        results = [(b, {"profile": r["profile"], "peak_live_bytes": r["peak_live_bytes"],
                        "largest_launch": {"bytes": r["largest_launch_bytes"]},
                        "unreadable_launches": r["unreadable_launches"],
                        "points": [{"ok": r["runs"], "fits": r["fits_without_oversub"],
                                    "unlimited_iteration_ns": r["unlimited_iteration_ns"],
                                    "iteration_ns": r["iteration_ns"] or 0,
                                    "overhead": (r["slowdown"] or 1) - 1,
                                    "h2d_bytes": r["h2d_bytes"], "d2h_bytes": r["d2h_bytes"],
                                    "error": r["why_not"]}]})
                   for b, r in zip(batches, rows)]
        tuned = tune_rows(results)
        best = choose(tuned)
        for r, t in zip(rows, tuned):
            r["batch"], r["samples_per_s"] = t["batch"], t["samples_per_s"]
        plan["batch"] = {"rows": [{"batch": t["batch"], "profile": t["profile"],
                                   "samples_per_s": t["samples_per_s"]} for t in tuned],
                         "choice": best["batch"] if best else None}
    png = args.png if args.png is not None else Path(
        re.sub(r"(\.oprof)?(\.gz)?$", "", args.profiles[0].name) + "-plan.png")
    png.parent.mkdir(parents=True, exist_ok=True)
    plot(png, plan)
    plan["png"] = str(png)
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        print(table(plan), end="")
        print(f"\nwrote {png}")
    return 0 if any(r["runs"] for r in rows) else 1


def add_parser(sub: argparse._SubParsersAction, repo: Path) -> None:
    p = sub.add_parser(
        "plan", help="will it fit, how slow, how much memory: one table per set of profiles",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For each profile (one training iteration: .oprof or .oprof.gz), on the "
                    "device model:\n"
                    "  peak live bytes, and whether they fit the device's memory without oversub;\n"
                    "  the iteration time and slowdown under swap mode at the device's memory\n"
                    "    (the simulator's cost policy over 2 MiB pages, at the memory less the\n"
                    "    1/16, at most 1 GiB, the library keeps back);\n"
                    "  the bytes moved per iteration and the host memory they need, against\n"
                    "    --host-memory (default: this machine's, from /proc/meminfo);\n"
                    "  the smallest device memory within 1.1x, 1.5x and 2x of the iteration\n"
                    "    with enough memory (a sweep, then bisection);\n"
                    "  with one model at several batch sizes (model-b32.oprof model-b64.oprof),\n"
                    "    the batch with the most samples per second (as tune-batch picks).\n"
                    "Writes a PNG of slowdown against device memory. Exit status 0 when at "
                    "least one\nprofile can run; 1 when none can, or the simulator refuses a "
                    "profile or the device;\n2 for a usage error (a missing file, a malformed "
                    "size). docs/guide/simulate.md.")
    p.add_argument("profiles", type=Path, nargs="+", metavar="TRACE",
                   help="profiles (.oprof or .oprof.gz), e.g. one model at several batch sizes")
    device_arguments(p)
    p.add_argument("--memory", metavar="SIZE",
                   help="the device's memory instead of the model's (a GPU of the same speed "
                        f"with less memory): {SIZE_FORMS}")
    p.add_argument("--host-memory", metavar="SIZE",
                   help=f"the host's memory ({SIZE_FORMS}; default: this machine's, from "
                        "/proc/meminfo)")
    p.add_argument("--batch", metavar="B1,B2,...",
                   help="the profiles' batch sizes in order (default: from the file names, "
                        "e.g. model-b64.oprof, when all name one model)")
    p.add_argument("--durations", choices=["auto", "model"], default="auto",
                   help="auto: the profile's durations, modeled where 0; model: every "
                        "duration modeled on the device (docs/simulate.md)")
    p.add_argument("--png", type=Path, metavar="PATH",
                   help="where the plot goes (default: ./<first trace's stem>-plan.png)")
    p.add_argument("--simulator", type=Path, metavar="PATH",
                   help=f"the {SIMULATOR} program (default: newest build*/tools/)")
    p.add_argument("--json", action="store_true", help="the same as one JSON object")
    p.set_defaults(func=lambda a: command_plan(a, repo))
