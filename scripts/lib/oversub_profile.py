"""`oversub profile` and `oversub report` (scripts/oversub calls these).

profile: runs a command under liboversub.so with OVERSUB_PROFILE_OUT set, shows the
profiler's progress lines, and with --iterations N stops the command (SIGTERM to
its process group) once the library has written the profile after N iterations.

report: reads a profile (oprof.py: a refused file is an error message and exit 1),
prints a summary, and writes <stem>.trace.json (Chrome Trace Event format, opens in
Perfetto / chrome://tracing) and <stem>.png (live bytes over the iteration, with
the device capacity as a line) next to it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oprof import Profile, ProfileError, read_profile  # noqa: E402
from png_plot import plot_live_bytes  # noqa: E402

DEFAULT_KERNEL_US = 1.0  # trace width of a launch without a measured duration


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


# ---- profile ------------------------------------------------------------------------

def run_profile(lib: Path, out: Path, command: list[str], iterations: int | None,
                marker: str | None, extra_env: dict[str, str]) -> int:
    env = dict(os.environ)
    entries = [e for e in env.get("LD_PRELOAD", "").replace(":", " ").split() if e]
    if str(lib) not in entries:
        entries.append(str(lib))
    env["LD_PRELOAD"] = " ".join(entries)
    env["OVERSUB_PROFILE_OUT"] = str(out)
    env.setdefault("OVERSUB_LOG", "info")
    if iterations:
        env["OVERSUB_PROFILE_ITERATIONS"] = str(iterations)
    if marker:
        env["OVERSUB_ITERATION_MARKER"] = marker
    env.update(extra_env)
    if out.exists():
        out.unlink()
    print(f"oversub profile: profiling {' '.join(command)} -> {out}", file=sys.stderr)
    try:
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as e:
        print(f"oversub profile: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127
    stopped = False
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("oversub: profile: wrote "):
            sys.stderr.write(line)
            if iterations and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                stopped = True
            continue
        if line.startswith("oversub: profile: ") and "iterations seen (" in line:
            sys.stderr.write(line[len("oversub: "):])  # the progress line
            continue
        if line.startswith("oversub: info: "):
            continue
        sys.stderr.write(line)
    rc = proc.wait()
    if stopped:
        print(f"oversub profile: stopped the command after {iterations} iterations",
              file=sys.stderr)
        rc = 0
    if not out.exists():
        print(f"oversub profile: no profile was written to {out}", file=sys.stderr)
        return rc or 1
    return rc


# ---- report -------------------------------------------------------------------------

def live_bytes(p: Profile) -> list[int]:
    """Bytes of the profile's buffers live before each launch of the iteration."""
    n = len(p.launches)
    delta = [0] * (n + 2)
    for a in p.allocations:
        start = 0 if a.long_lived else a.alloc_at
        end = n + 1 if a.free_at is None else a.free_at  # not freed: live to the end
        if end <= start:
            continue
        delta[start] += a.bytes
        delta[min(end, n + 1)] -= a.bytes
    out, now = [], 0
    for i in range(n + 1):
        now += delta[i]
        out.append(now)
    return out


def uses(p: Profile) -> dict[int, list[int]]:
    u: dict[int, list[int]] = {}
    for i, launch in enumerate(p.launches):
        for b in launch.buffers:
            u.setdefault(b, []).append(i)
    return u


def strip_params(name: str) -> str:
    """'ns::f(int, float*) const' -> 'ns::f'; '(anonymous namespace)::g()' kept right."""
    name = name.removesuffix(" const")
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def symbolize(p: Profile, site: int | None, frames: int = 2) -> str:
    """The call site's first frames outside CUDA and libc, innermost first, with
    file:line from addr2line when the module has debug information."""
    if site is None:
        return "?"
    addr2line = shutil.which("addr2line")
    out: list[str] = []
    for f in p.call_sites[site]:
        module = p.name(f.module)
        symbol = p.name(f.symbol)
        if any(s in module for s in ("libcudart", "libcuda", "libc.so", "ld-linux")):
            continue
        where = ""
        if addr2line and Path(module).exists():
            r = subprocess.run([addr2line, "-f", "-C", "-e", module, hex(max(f.offset - 1, 0))],
                               capture_output=True, text=True)
            lines = r.stdout.split("\n")
            if r.returncode == 0 and len(lines) >= 2:
                if lines[0] not in ("??", ""):
                    symbol = lines[0]
                if not lines[1].startswith("??"):
                    where = Path(lines[1].split(" ")[0]).name
        name = strip_params(symbol) or f"{Path(module).name}+{f.offset:#x}"
        out.append(f"{name} ({where or Path(module).name})")
        if len(out) == frames:
            break
    return " < ".join(out) or "?"


def percentile(xs: list[int], q: float) -> int:
    if not xs:
        return 0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def buffer_label(p: Profile, b: int) -> str:
    a = p.allocations[b]
    return f"long-lived @{a.address:#x}" if a.long_lived else f"#{a.ordinal}"


def unreadable_lines(p: Profile) -> list[str]:
    """One line per kernel name with launches marked unreadable (Note [A launch whose
    buffers are not known] in profiler/profile_format.h), most first; none when no
    launch is marked."""
    counts: dict[str, int] = {}
    for launch in p.launches:
        if launch.unreadable:
            name = p.strings[launch.name]
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return []
    lines = [f"launches with an unreadable parameter layout: {sum(counts.values())} of "
             f"{len(p.launches)} (their buffers are not known)"]
    for name, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  unreadable: {name}: {count} launch{'es' if count != 1 else ''} in the "
                     f"iteration, taken to touch any page in swap mode (and to use every "
                     f"buffer live at them by oversub simulate)")
    return lines


def recorded(p: Profile) -> bool:
    """An iteration recorded off the GPU (oversub trace-torch): source "recorded", or
    a recording written before that source existed (its program names the command)."""
    return p.source == "recorded" or p.program.startswith("oversub trace-torch")


def max_idle(p: Profile, b: int, us: list[int]) -> int:
    """The most launches between two uses of buffer b (its uses us, in order). A
    long-lived buffer's last use of one iteration is followed by its first of the
    next, so its gap wraps around the iteration; a buffer allocated in the iteration
    is freed and made anew, so only the gaps within its life count."""
    gaps = [y - x for x, y in zip(us, us[1:])]
    if p.allocations[b].long_lived:
        gaps.append(us[0] + len(p.launches) - us[-1])
    return max(gaps, default=0)


def summary(p: Profile) -> list[str]:
    n = len(p.launches)
    live = live_bytes(p)
    used = uses(p)
    kernel_ns = sum(l.duration_ns for l in p.launches)
    if recorded(p):
        lines = [f"program: {p.program}",
                 f"iteration: {n} launches, recorded off the GPU (oversub trace-torch, "
                 f"meta tensors): the second of {p.iterations_seen} iterations run; "
                 f"no GPU ran it",
                 f"kernels per iteration: {n} ({len({l.name for l in p.launches})} "
                 f"distinct), kernel time {kernel_ns / 1e3:.1f} us (modeled: a roofline "
                 f"of each operator on the device model, docs/traces.md)"]
    else:
        how = {"automatic": "found automatically (repeating launch sequence)",
               "marker": f"marked by kernel name containing '{p.marker}'",
               "api": "marked by oversub_iteration_begin()"}[p.source]
        lines = [f"program: {p.program}",
                 f"iteration: {n} launches, {how}; {p.iterations_seen} iterations seen, "
                 f"{p.total_launches} launches in the run "
                 f"(seen through {'CUPTI' if p.cupti else 'oversub hooks, no durations'})",
                 f"kernels per iteration: {n} ({len({l.name for l in p.launches})} "
                 f"distinct), kernel time {kernel_ns / 1e3:.1f} us"]
    lines += unreadable_lines(p)
    peak = max(live) if live else 0
    cap = f" of {fmt_bytes(p.capacity_bytes)} device capacity" if p.capacity_bytes else ""
    lines.append(f"peak live bytes: {fmt_bytes(peak)}{cap} "
                 f"(at launch {live.index(peak) if live else 0})")
    touched = sum(p.allocations[b].bytes for b in used)
    ll = [a for a in p.allocations if a.long_lived]
    lines.append(f"bytes touched: {fmt_bytes(touched)} in {len(used)} buffers "
                 f"({len(ll)} long-lived, {fmt_bytes(sum(a.bytes for a in ll))}; "
                 f"{len(p.allocations) - len(ll)} allocated in the iteration)")
    for kind in ("h2d", "d2h", "d2d", "memset"):
        cs = [c for c in p.copies if c.kind == kind]
        if cs:
            lines.append(f"copies {kind}: {len(cs)}, {fmt_bytes(sum(c.bytes for c in cs))}")
    if p.h2d_bytes_per_s or p.d2h_bytes_per_s:
        what = ("link (the device model's, none measured)" if recorded(p)
                else "link measured")
        lines.append(f"{what}: h2d {p.h2d_bytes_per_s / 1e9:.1f} GB/s, "
                     f"d2h {p.d2h_bytes_per_s / 1e9:.1f} GB/s")
    gaps = [b - a for us in used.values() for a, b in zip(us, us[1:])]
    idle = sum(1 for b, us in used.items() if max_idle(p, b, us) > n // 2)
    lines.append(f"reuse distance (launches between uses of a buffer): median "
                 f"{percentile(gaps, 0.5)}, 90th percentile {percentile(gaps, 0.9)}, max "
                 f"{max(gaps) if gaps else 0}; {idle} buffers idle for more than half the "
                 f"iteration")
    lines.append("largest buffers:")
    lines.append(f"  {'bytes':>10}  {'buffer':<26} {'first use':<18} {'last use':<18} "
                 f"{'max idle':>8}  call site")
    names = p.strings

    def at(i: int) -> str:
        return f"{i} {strip_params(names[p.launches[i].name])}"[:18]

    for b in sorted(used, key=lambda b: -p.allocations[b].bytes)[:10]:
        us = used[b]
        idle_gap = max_idle(p, b, us)
        lines.append(f"  {fmt_bytes(p.allocations[b].bytes):>10}  {buffer_label(p, b):<26} "
                     f"{at(us[0]):<18} {at(us[-1]):<18} {idle_gap:>8}  "
                     f"{symbolize(p, p.allocations[b].call_site)}")
    return lines


def trace_events(p: Profile) -> dict:
    """Chrome Trace Event format: kernels (X), live bytes (C), buffer lifetimes (b/e)."""
    pid = 1
    ev: list[dict] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "oversub profile"}},
        {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "kernels"}},
        {"ph": "M", "pid": pid, "tid": 2, "name": "thread_name", "args": {"name": "copies"}},
    ]
    starts, t = [], 0.0
    for launch in p.launches:
        starts.append(t)
        t += launch.duration_ns / 1e3 if launch.duration_ns else DEFAULT_KERNEL_US
    starts.append(t)
    live = live_bytes(p)
    for i, launch in enumerate(p.launches):
        dur = launch.duration_ns / 1e3 if launch.duration_ns else DEFAULT_KERNEL_US
        ev.append({"ph": "X", "pid": pid, "tid": 1, "name": p.strings[launch.name],
                   "ts": starts[i], "dur": dur, "cat": "kernel",
                   "args": {"launch": i, "buffers": [buffer_label(p, b) for b in launch.buffers],
                            "measured": bool(launch.duration_ns),
                            "unreadable": launch.unreadable}})
    for i, v in enumerate(live):
        ev.append({"ph": "C", "pid": pid, "name": "live bytes", "ts": starts[i],
                   "args": {"bytes": v}})
    for c in p.copies:
        ts = starts[c.before_launch]
        ev.append({"ph": "X", "pid": pid, "tid": 2, "name": f"{c.kind} {fmt_bytes(c.bytes)}",
                   "ts": ts, "dur": c.duration_ns / 1e3 if c.duration_ns else 0.1, "cat": "copy",
                   "args": {"bytes": c.bytes, "kind": c.kind}})
    n = len(p.launches)
    for b, a in enumerate(p.allocations):
        start = 0 if a.long_lived else a.alloc_at
        end = n if a.free_at is None else a.free_at
        name = f"{buffer_label(p, b)} {fmt_bytes(a.bytes)}"
        common = {"pid": pid, "cat": "buffer", "id": b, "name": name}
        ev.append({**common, "ph": "b", "ts": starts[min(start, n)],
                   "args": {"bytes": a.bytes, "long_lived": a.long_lived,
                            "ordinal": a.ordinal}})
        ev.append({**common, "ph": "e", "ts": starts[min(max(end, start), n)]})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"program": p.program, "source": p.source,
                          "launches_per_iteration": n, "capacity_bytes": p.capacity_bytes}}


def run_report(path: Path) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `oversub report x | head`
    try:
        p = read_profile(path)
    except ProfileError as e:
        print(f"oversub report: {path}: refused: {e}", file=sys.stderr)
        return 1
    for line in summary(p):
        print(line)
    stem = path.with_suffix("")
    trace = Path(f"{stem}.trace.json")
    trace.write_text(json.dumps(trace_events(p)))
    png = Path(f"{stem}.png")
    plot_live_bytes(png, live_bytes(p), p.capacity_bytes,
                    f"live bytes over one iteration ({len(p.launches)} launches)")
    print(f"wrote {trace} (open in https://ui.perfetto.dev) and {png}")
    return 0
