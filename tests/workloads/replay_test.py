#!/usr/bin/env python3
"""oversub-replay on simgpu: replays a profile taken at test time and checks its data.

The trace is simtrain profiled by the real profiler (LD_PRELOAD=liboversub.so,
OVERSUB_MODE=track, OVERSUB_PROFILE_OUT), read back with scripts/lib/oprof.py.

  unlimited  replay with plenty of memory, simgpu's race detector aborting: every
             buffer whose contents a launch reads after an earlier launch or copy
             wrote them (counted here from the profile) is verified, no mismatch,
             every trace launch replayed, each iteration no faster than the trace's
             kernel time, and the same checksums on a second run
  swap, um   SIMGPU_MEMORY = the replay's peak / --ratio: alone the replay runs out
             of memory; under OVERSUB_MODE=swap or um it verifies the same buffers
             and prints the same checksums as with plenty of memory, and oversub's
             statistics pass the swap-mode (um-mode) checks of swap_checks.py
  edges      a profile written here with oprof.py with what simtrain's lacks (a
             launch over more buffers than one replayed launch takes, lifetimes to
             widen, every copy kind): the plan line agrees with the profile, and the
             replay passes with plenty of memory, under swap (races reported, see
             Note [Races on the edge trace]) and under um (races abort)
  trace      a shipped profile of a real model (--trace, traces/), sizes scaled by
             --scale so that it runs in seconds, in each of --modes: pool with
             plenty of memory under OVERSUB_MODE=pool (races abort; same checksums:
             it caught large blocks unmapped under their last kernel, Note [Unmap
             after all work] in pool/stream_fences.h), swap and um as above
  cli        bad options and refused profiles stop with their messages
  large      weights each more than a quarter of the swap capacity, every launch within
             it (--ratio 2): under swap, as above, and no kernel reads a page from the
             host (Note [Windows into large allocations] in residency/swap_engine.h)
  over       one launch over more pages than swap holds, the others within it (--ratio
             1.5): under swap the learned schedule is followed all the same, that launch
             reaching the rest of its memory on the host (Note [Launches over the room]
             in policy/iteration_model.h)
  corrupt    --corrupt-after N overwrites a word the checker must then catch: exit 1
             with "data check failed" naming the overwritten buffer, with plenty of
             memory and under OVERSUB_MODE=swap

  replay_test.py --case swap --replay oversub-replay --simtrain simtrain --lib liboversub.so
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "preload"))
sys.path.insert(0, str(HERE.parents[1] / "scripts" / "lib"))

from oprof import Allocation, Copy, Launch, Profile, read_profile, write_profile  # noqa: E402
from swap_checks import (OOM_RE, check_link, check_swap, check_um, fail,  # noqa: E402
                         read_stats, run)

TRACE_ARGS = ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "5"]
ITER_RE = re.compile(r"^iter (\d+) time ([0-9.]+) ms checksum (0x[0-9a-f]+) .*$", re.M)
VERIFIED_RE = re.compile(r"^data verified: (\d+) buffers x (\d+) launches "
                         r"\((\d+) words checked, (\d+) mismatches\)$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
MARKED_RE = re.compile(r"^iterations marked for oversub: (yes|no)$", re.M)
PLAN_FULL_RE = re.compile(r"^plan: peak (\d+) bytes \(long-lived (\d+)\), at most (\d+) "
                          r"buffers per launch, (\d+) launches split, (\d+) lifetimes widened, "
                          r"(\d+) long-lived freed by the trace kept, (\d+) copies skipped$",
                          re.M)
RACE_RE = re.compile(r"^simgpu: race on .*$", re.M)
KERNELS_RE = re.compile(r"^launches: (\d+) replayed as (\d+) kernels$", re.M)
CORRUPT_RE = re.compile(r"^corrupt: after launch \d+ overwrote word \d+ of buffer (\d+) ", re.M)
NO_FREES_HINT = "no allocation has been freed since start"
FAILED_RE = re.compile(r"oversub-replay: data check failed: iteration \d+, trace launch \d+ "
                       r"\(.*\): buffer (\d+) ")
WRITING_COPIES = ("h2d", "memset")


def make_trace(args: argparse.Namespace, tmp: Path) -> Path:
    out = tmp / "simtrain.oprof"
    proc = run([str(args.simtrain), *TRACE_ARGS],
               {"OVERSUB_MODE": "track", "OVERSUB_PROFILE_OUT": str(out)}, args.lib)
    if proc.returncode != 0 or not out.is_file():
        fail("profiling simtrain wrote no profile", proc)
    return out


def make_edge_trace(tmp: Path) -> Path:
    """A profile written with oprof.py that has what simtrain's lacks: a launch with
    more buffers than one replayed launch takes, lifetimes the replay must widen, a
    buffer used only by a memset, a long-lived buffer the iteration frees, every copy
    kind and a copy with no device buffer."""
    KiB, MiB = 1 << 10, 1 << 20
    p = Profile(source="api", cupti=True, iterations_seen=3, total_launches=24, first_launch=8,
                marker="", program="replay_test.py", capacity_bytes=0, h2d_bytes_per_s=0,
                d2h_bytes_per_s=0, iteration_kernel_ns=0)
    p.strings = ["gemm", "multi_tensor_apply", "fill"]
    # Per-iteration buffers first, by ordinal: (bytes, alloc_at, free_at).
    fresh = {"a0": (4 * MiB, 0, 4), "a1": (3 * MiB, 1, None), "a2": (4 * MiB + 12, 2, 5),
             "c": (256 * KiB, 3, 3), "e": (MiB, 4, 6), "g": (2 * MiB, 5, 7)}
    idx: dict[str, int] = {}
    for name, (size, at, free) in fresh.items():
        idx[name] = len(p.allocations)
        p.allocations.append(Allocation(len(p.allocations), size, 0x10000000 * (1 + len(idx)),
                                        at, free, False, None))
    old = {"w1": (4 * MiB, None), "w2": (2 * MiB, None), "x": (MiB, 1)}
    old.update({f"s{i}": (32 * KiB + 4 * i, None) for i in range(40)})
    for name, (size, free) in old.items():
        idx[name] = len(p.allocations)
        p.allocations.append(Allocation(None, size, 0x700000000 + 0x1000000 * len(idx), 0,
                                        free, True, None))
    small = [f"s{i}" for i in range(40)]
    launches = [(0, ["w1", "a0", "x"]), (0, ["a0", "a1", "w2"]), (0, ["a1", "a2"]),
                (2, ["e", "a2"]), (1, small + ["a1"]), (0, ["a2", "g", "w1"]),
                (0, ["g", "e"]), (1, ["w1", "w2"] + small[:8])]
    for k, (name, bufs) in enumerate(launches):
        p.launches.append(Launch(name, 20000 + 5000 * k, k + 1, sorted(idx[b] for b in bufs)))
    p.iteration_kernel_ns = sum(l.duration_ns for l in p.launches)
    p.copies = [Copy(0, "h2d", 4 * MiB, 0, idx["a0"]), Copy(1, "h2d", 1024, 0, None),
                Copy(2, "d2d", MiB, 0, idx["a1"]), Copy(3, "memset", 256 * KiB, 0, idx["c"]),
                Copy(5, "other", 64 * KiB, 0, idx["e"]), Copy(6, "memset", 100, 0, idx["g"]),
                Copy(7, "d2h", 4, 0, idx["g"])]
    out = tmp / "edges.oprof"
    write_profile(out, p)
    return out


def weights_ring(tmp: Path, name: str, weight_bytes: int, duration_ns: int,
                 wide_after: int | None = None) -> Path:
    """Eight long-lived weights of weight_bytes, each launch over two of them in a ring;
    with wide_after = k, one more launch after the k-th, over the first six."""
    launches = [sorted({k, (k + 1) % 8}) for k in range(8)]
    if wide_after is not None:
        launches.insert(wide_after + 1, list(range(6)))
    p = Profile(source="api", cupti=True, iterations_seen=3, total_launches=3 * len(launches),
                first_launch=len(launches), marker="", program="replay_test.py",
                capacity_bytes=0, h2d_bytes_per_s=0, d2h_bytes_per_s=0, iteration_kernel_ns=0)
    p.strings = ["gemm"]
    for i in range(8):
        p.allocations.append(Allocation(None, weight_bytes, 0x700000000 + 0x1000000 * i, 0,
                                        None, True, None))
    for k, buffers in enumerate(launches):
        p.launches.append(Launch(0, duration_ns, k + 1, buffers))
    p.iteration_kernel_ns = sum(l.duration_ns for l in p.launches)
    out = tmp / f"{name}.oprof"
    write_profile(out, p)
    return out


def make_large_trace(tmp: Path) -> Path:
    """At --ratio 2 each weight is more than a quarter of the swap capacity, and each
    launch still fits in it."""
    return weights_ring(tmp, "large", 6 * (1 << 20) + 12, 20000)


def make_over_trace(tmp: Path) -> Path:
    """At --ratio 1.5 the launch over six weights spans more pages than swap holds."""
    return weights_ring(tmp, "over", 4 << 20, 200000, wide_after=3)


def plan_counts(profile) -> dict:
    """What the replay's plan line must say, from the profile."""
    n = len(profile.launches)
    widened = set()
    for b, a in enumerate(profile.allocations):
        if a.long_lived:
            continue
        end = n if a.free_at is None else a.free_at
        uses = [k for k, l in enumerate(profile.launches) if b in l.buffers]
        copies = [c.before_launch for c in profile.copies if c.buffer == b]
        if any(k < a.alloc_at or k >= end for k in uses) or \
                any(c < a.alloc_at or c > end for c in copies):
            widened.add(b)
    return {"max": max(len(l.buffers) for l in profile.launches),
            "split": sum(len(l.buffers) > 32 for l in profile.launches),
            "widened": len(widened),
            "freed": sum(a.long_lived and a.free_at is not None for a in profile.allocations),
            "skipped": sum(c.buffer is None or c.bytes == 0 for c in profile.copies),
            "kernels": sum(max(1, -(-len(l.buffers) // 32)) for l in profile.launches)}


def verifiable(profile, iters: int) -> int:
    """Buffers whose contents a launch reads after an earlier launch or a writing
    copy (H2D, memset) wrote them in the same lifetime: the replay must verify each.
    A per-iteration buffer lives within one iteration (the replay widens its lifetime
    to cover every use), a long-lived one through all of them."""
    n = len(profile.launches)
    events: dict[int, list[tuple[int, str]]] = {}  # buffer -> (time, what); launch k at 2k+1
    for k, launch in enumerate(profile.launches):
        for b in launch.buffers:
            events.setdefault(b, []).append((2 * k + 1, "launch"))
    for c in profile.copies:
        if c.buffer is not None and c.bytes >= 4 and c.kind in WRITING_COPIES:
            events.setdefault(c.buffer, []).append((2 * min(c.before_launch, n), "write"))
    count = 0
    for b, evs in events.items():
        launches = [t for t, what in evs if what == "launch"]
        if not launches:
            continue
        first_write = min(t for t, _ in evs)
        if profile.allocations[b].long_lived and iters >= 2:
            count += 1
        elif any(t > first_write for t in launches):
            count += 1
    return count


def parse(proc, what: str, ok_codes: tuple[int, ...] = (0,)) -> dict:
    out = proc.stdout
    iters = ITER_RE.findall(out)
    verified, peak, marked = VERIFIED_RE.search(out), PEAK_RE.search(out), MARKED_RE.search(out)
    if (proc.returncode not in ok_codes or not iters or verified is None or peak is None
            or marked is None):
        fail(f"the replay {what} failed or printed no summary", proc)
    return {"iters": iters, "checksums": [c for _, _, c in iters],
            "times_ms": [float(t) for _, t, _ in iters],
            "buffers": int(verified.group(1)), "launches": int(verified.group(2)),
            "words": int(verified.group(3)), "mismatches": int(verified.group(4)),
            "peak": int(peak.group(1)), "marked": marked.group(1) == "yes"}


def reference(args: argparse.Namespace, trace: Path) -> dict:
    profile = read_profile(trace)
    cmd = [str(args.replay), str(trace), "--iters", str(args.iters)]
    if args.scale:
        cmd += ["--scale", args.scale]
    if args.footprint:
        cmd += ["--footprint", args.footprint]
    if args.allocator:
        cmd += ["--allocator", args.allocator]
    proc = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    got = parse(proc, "with plenty of memory")
    want_buffers = verifiable(profile, args.iters)
    if got["mismatches"] != 0 or got["words"] == 0:
        fail(f"mismatches or nothing checked: {got}", proc)
    if got["buffers"] != want_buffers or want_buffers == 0:
        fail(f"verified {got['buffers']} buffers, the profile has {want_buffers} whose data a "
             "launch reads after it was written", proc)
    if got["launches"] != args.iters * len(profile.launches):
        fail(f"replayed {got['launches']} launches, want {args.iters} x {len(profile.launches)}",
             proc)
    kernel_ms = profile.iteration_kernel_ns / 1e6
    if kernel_ms <= 0 or any(t < kernel_ms for t in got["times_ms"]):
        fail(f"an iteration took less than the trace's kernel time {kernel_ms} ms: "
             f"{got['times_ms']}", proc)
    got["profile"] = profile
    got["cmd"] = cmd
    return got


def case_edges(args: argparse.Namespace, tmp: Path) -> None:
    trace = make_edge_trace(tmp)
    ref = reference(args, trace)
    proc = run(ref["cmd"], {"SIMGPU_RACE": "abort"}, None)
    plan = PLAN_FULL_RE.search(proc.stdout)
    kernels = KERNELS_RE.search(proc.stdout)
    want = plan_counts(ref["profile"])
    if plan is None or kernels is None:
        fail("no plan or launch line", proc)
    got = {"max": int(plan.group(3)), "split": int(plan.group(4)),
           "widened": int(plan.group(5)), "freed": int(plan.group(6)),
           "skipped": int(plan.group(7)), "kernels": int(kernels.group(2)) // args.iters}
    if got != want or int(plan.group(1)) != ref["peak"] or want["split"] == 0 or \
            want["widened"] == 0:
        fail(f"plan {got}, from the profile {want}; planned peak {plan.group(1)}, "
             f"replayed {ref['peak']}", proc)
    print(f"edges: plan {got} as the profile says; {ref['buffers']} buffers verified over "
          f"{ref['launches']} launches, peak {ref['peak']} bytes")
    # Kernels take their recorded durations: doubling every duration lengthens the
    # iteration by the trace's kernel time (launch and copy overheads cancel; the
    # buffers are small enough that bandwidth never sets a kernel's time).
    slow = read_profile(trace)
    for launch in slow.launches:
        launch.duration_ns *= 2
    slow.iteration_kernel_ns *= 2
    slow_trace = tmp / "edges-slow.oprof"
    write_profile(slow_trace, slow)
    cmd = [str(slow_trace) if part == str(trace) else part for part in ref["cmd"]]
    slower = parse(run(cmd, {"SIMGPU_RACE": "abort"}, None), "with doubled durations")
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    added_ms = mean(slower["times_ms"]) - mean(ref["times_ms"])
    kernel_ms = ref["profile"].iteration_kernel_ns / 1e6
    if abs(added_ms - kernel_ms) > 0.01 * kernel_ms:
        fail(f"doubling the durations added {added_ms} ms per iteration, the trace's kernel "
             f"time is {kernel_ms} ms")
    print(f"edges: doubled durations add {added_ms:.6f} ms per iteration, kernel time "
          f"{kernel_ms:.6f} ms")
    # Note [Races on the edge trace]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # On this trace oversub's swap mode once moved
    # pages without ordering after the kernel on the legacy stream that last wrote
    # them (simgpu: a write by replay_kernel unordered with a DtoD read on oversub's
    # copy stream), though the data survived: the page belonged to an allocation
    # larger than a quarter of the capacity, which a launch asks for only in windows
    # from its argument words, and the kernel reached it outside them. Every page of
    # such an allocation now records the launch's stream as a user (byte_range::reach
    # in residency/swap_engine.h). 'edges' checks the data with races reported;
    # 'edges-races' aborts at the first one.
    case_oversubscribed(args, trace, "swap", ref, "abort" if args.races_abort else "report")
    if not args.races_abort:
        case_oversubscribed(args, trace, "um", ref)


def case_unlimited(args: argparse.Namespace, trace: Path) -> None:
    ref = reference(args, trace)
    again = parse(run(ref["cmd"], {"SIMGPU_RACE": "abort"}, None), "a second time")
    if again["checksums"] != ref["checksums"] or again["times_ms"] != ref["times_ms"]:
        fail(f"two runs differ: {ref['iters']} vs {again['iters']}")
    print(f"unlimited: {ref['buffers']} buffers verified over {ref['launches']} launches, "
          f"{ref['words']} words, checksums {ref['checksums']}, "
          f"iteration {ref['times_ms'][0]} ms (kernels "
          f"{ref['profile'].iteration_kernel_ns / 1e6} ms), peak {ref['peak']} bytes")


def case_oversubscribed(args: argparse.Namespace, trace: Path, mode: str,
                        ref: dict | None = None, races: str = "abort",
                        um_prefetches: bool = True) -> dict | None:
    """Replays trace under mode at --ratio and checks it; its statistics (None where
    simgpu reported races)."""
    ref = ref or reference(args, trace)
    device = int(ref["peak"] / args.ratio)
    alone = run(ref["cmd"], {"SIMGPU_MEMORY": str(device)}, None)
    if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
        fail(f"without oversub the replay should run out of memory on {device} bytes", alone)
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        model = {"SIMGPU_DEVICE": args.device, "OVERSUB_TUNE": "0"} if args.device else {}
        # See Note [No frees seen] in core/schedule.cc: said where nothing was freed.
        hint = {"OVERSUB_LOG": "info"} if args.allocator in ("caching", "async") else {}
        proc = run(ref["cmd"], {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": races,
                                "SIMGPU_REPORT": "1", "OVERSUB_MODE": mode,
                                "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file),
                                **model, **hint},
                   args.lib)
        if hint and (NO_FREES_HINT in proc.stderr) != (args.allocator == "caching"):
            fail(f"--allocator {args.allocator}: the hint that nothing was freed "
                 f"{'is missing' if args.allocator == 'caching' else 'was given'}", proc)
        # SIMGPU_RACE=report: simgpu exits 3 after a run in which it reported races.
        raced = RACE_RE.findall(proc.stderr)
        got = parse(proc, f"under OVERSUB_MODE={mode} at {args.ratio}x",
                    (0, 3) if raced and races == "report" else (0,))
        # simgpu ends a run with races before oversub writes its statistics.
        stats = None if raced and races == "report" else read_stats(stats_file, proc)
    if not got["marked"]:
        fail("the replay did not find oversub_iteration_begin under LD_PRELOAD", proc)
    for key in ("checksums", "buffers", "launches", "words", "mismatches"):
        if got[key] != ref[key]:
            fail(f"{key} differ under OVERSUB_MODE={mode}: {got[key]} vs {ref[key]} with "
                 "plenty of memory", proc)
    if stats is None:
        moved = "no oversub statistics (simgpu exited 3 after reporting races)"
    elif mode == "swap":
        # A launch whose buffers exceed the capacity runs with part of them read from
        # the host (Note [Larger than the capacity] in core/launch_residency.cc); where
        # every launch fits, no kernel may read a page from the host.
        fits = largest_launch_bytes(ref["profile"], args.scale) <= \
            stats["pool"]["device0"]["swap"]["capacity_bytes"]
        moved = check_swap(stats, proc, device, fits, args.expect_scheduled)
        if args.expect_scheduled:
            check_link(stats["schedule"])
            s = stats["schedule"]
            # See Note [A clock for the first moves] in core/schedule.cc: the engine
            # timed the moves before the plan, so the plan counts the mover's remaps.
            if s["remap_source"] not in ("measured", "batches") or s["predicted_remap_ns"] == 0:
                fail(f"the plan counted no remaps: {s}", proc)
            moved += check_batch_costs(s, args.expect_batch_costs, proc)
            moved += (f"; link {s['h2d_gbps']:.2f} / {s['d2h_gbps']:.2f} GB/s each way, setup "
                      f"{s['copy_setup_ns']} ns, the device model's")
    else:
        moved = check_um(stats, device, um_prefetches, proc)
    if raced:
        print(f"simgpu reported {len(raced)} races (SIMGPU_RACE={races}), the first:\n  {raced[0]}")
    print(f"{mode} at {args.ratio}x ({device} of {ref['peak']} bytes): {got['buffers']} buffers "
          f"verified over {got['launches']} launches, checksums equal to the unlimited run; "
          f"iteration times {got['times_ms']} ms; {moved}")
    return stats


def check_batch_costs(s: dict, expected: bool, proc) -> str:
    """See Note [The mover's costs as followed] in core/schedule_costs.cc: once the
    schedule's batches are timed, the followed schedule is predicted again with their
    costs; with --expect-batch-costs that must have happened, and the prediction must be
    within 10% of the last iteration measured."""
    said = (f"; remaps costed from {s['remap_source']} (run {s['remap_run_ns']} ns, grouped "
            f"{s['remap_grouped_run_ns']}, page {s['remap_page_ns']}), predicted "
            f"{s['predicted_ns'] / 1e6:.2f} ms (planned {s['planned_ns'] / 1e6:.2f}), measured "
            f"{s['measured_ns'] / 1e6:.2f}")
    if not expected:
        return said
    if s["remap_source"] != "batches":
        fail(f"the mover's batches were not taken as its costs: {s}", proc)
    if s["measured_ns"] == 0 or abs(s["predicted_ns"] / s["measured_ns"] - 1) > 0.10:
        fail(f"predicted {s['predicted_ns']} ns, measured {s['measured_ns']}: {s}", proc)
    return said


def largest_launch_bytes(profile, scale: str | None) -> int:
    """The most bytes one launch's buffers may span in 2 MiB pages at the replay's
    scale: each buffer rounded up to whole pages, and one page more for its
    alignment."""
    page = 2 << 20
    factor = float(scale) if scale else 1.0

    def pages(b: int) -> int:
        return -(-math.ceil(profile.allocations[b].bytes * factor) // page) * page + page
    return max((sum(pages(b) for b in launch.buffers) for launch in profile.launches),
               default=0)


def case_pool(args: argparse.Namespace, trace: Path, ref: dict | None = None) -> None:
    ref = ref or reference(args, trace)
    proc = run(ref["cmd"], {"SIMGPU_RACE": "abort", "OVERSUB_MODE": "pool"}, args.lib)
    got = parse(proc, "under OVERSUB_MODE=pool with plenty of memory")
    if not got["marked"]:
        fail("the replay did not find oversub_iteration_begin under LD_PRELOAD", proc)
    for key in ("checksums", "buffers", "launches", "words", "mismatches"):
        if got[key] != ref[key]:
            fail(f"{key} differ under OVERSUB_MODE=pool: {got[key]} vs {ref[key]} without "
                 "oversub", proc)
    print(f"pool with plenty of memory: {got['buffers']} buffers verified over "
          f"{got['launches']} launches, checksums equal to the run without oversub, no race")


def case_cli(args: argparse.Namespace, tmp: Path) -> None:
    """Bad options stop with status 2 and name the option; a profile the reader
    refuses stops with status 1 and the reader's message (docs/profile-format.md)."""
    trace = make_edge_trace(tmp)
    for bad, says in ((["--iters", "0"], "--iters"), (["--scale", "-1"], "--scale"),
                      (["--footprint", "none"], "--footprint"), (["--frobnicate"], "unknown"),
                      ([], "")):
        cmd = [str(args.replay), *([str(trace)] if bad else []), *bad]
        proc = run(cmd, {}, None)
        if proc.returncode != 2 or says not in proc.stderr or "usage:" not in proc.stderr:
            fail(f"{bad or 'no profile'} should stop with status 2 naming {says!r}", proc)
    data = bytearray(trace.read_bytes())
    data[len(data) // 2] ^= 0xFF
    broken = tmp / "broken.oprof"
    broken.write_bytes(bytes(data))
    for path, says in ((broken, "checksum mismatch: the file is corrupt"),
                       (tmp / "missing.oprof", "missing.oprof")):
        proc = run([str(args.replay), str(path)], {}, None)
        if proc.returncode != 1 or says not in proc.stderr:
            fail(f"{path.name} should be refused with {says!r}", proc)
    proc = run([str(args.replay), str(trace), "--iters", "1", "--corrupt-after", "1000"], {}, None)
    if proc.returncode != 0 or "corrupt: launch 1000 never reached" not in proc.stdout:
        fail("--corrupt-after past the run should say so", proc)
    print("cli: bad options, a corrupt and a missing profile refused with their messages")


def case_corrupt(args: argparse.Namespace, trace: Path) -> None:
    ref = reference(args, trace)
    n = len(ref["profile"].launches)
    for env, lib, label in (({}, None, "plenty of memory"),
                            ({"SIMGPU_MEMORY": str(int(ref["peak"] / args.ratio)),
                              "OVERSUB_MODE": "swap"}, args.lib, "OVERSUB_MODE=swap")):
        for after in (n // 2, n + n // 3):
            proc = run([*ref["cmd"], "--corrupt-after", str(after)], env, lib)
            hit, caught = CORRUPT_RE.search(proc.stdout), FAILED_RE.search(proc.stderr)
            if proc.returncode != 1 or hit is None or caught is None:
                fail(f"--corrupt-after {after} ({label}) was not caught", proc)
            if hit.group(1) != caught.group(1):
                fail(f"overwrote buffer {hit.group(1)}, the check named {caught.group(1)}", proc)
            print(f"corrupt after {after} ({label}): caught in buffer {caught.group(1)}: "
                  f"{caught.group(0)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["unlimited", "swap", "um", "corrupt", "edges", "trace",
                                       "cli", "large", "over"],
                    required=True)
    ap.add_argument("--replay", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--ratio", type=float, default=3.0, help="peak / device memory")
    ap.add_argument("--trace", type=Path, help="trace: the profile to replay")
    ap.add_argument("--scale", help="the replay's --scale (buffer and copy bytes times it)")
    ap.add_argument("--footprint", choices=["read", "readwrite"],
                    help="the replay's --footprint (readwrite: simgpu sees the kernel's writes)")
    ap.add_argument("--modes", nargs="+", choices=["pool", "swap", "um"],
                    default=["swap", "um"], help="trace: the oversub modes to run")
    ap.add_argument("--races-abort", action="store_true",
                    help="edges: SIMGPU_RACE=abort under swap (else report)")
    ap.add_argument("--expect-scheduled", action="store_true",
                    help="swap: the learned schedule must be followed, its plan counting "
                         "the measured remaps")
    ap.add_argument("--device",
                    help="oversubscribed runs: SIMGPU_DEVICE (a model in SIMGPU_DEVICE_DIR), "
                         "with OVERSUB_TUNE=0 so that one schedule is followed")
    ap.add_argument("--expect-batch-costs", action="store_true",
                    help="swap, with --expect-scheduled: the followed schedule predicted "
                         "again from the mover's batches, within 10%% of the measured "
                         "iteration")
    ap.add_argument("--allocator", choices=["direct", "caching", "async"],
                    help="the replay's --allocator (caching: PyTorch's default allocator; "
                    "async: its backend:cudaMallocAsync)")
    args = ap.parse_args()
    if args.device:
        # The checks read the model's figures (swap_checks.device_figure).
        os.environ["SIMGPU_DEVICE"] = args.device
    with tempfile.TemporaryDirectory() as tmp:
        if args.case == "edges":
            case_edges(args, Path(tmp))
            return 0
        if args.case == "cli":
            case_cli(args, Path(tmp))
            return 0
        if args.case == "large":
            # See Note [Windows into large allocations] in residency/swap_engine.h: each
            # launch fits, so under swap each of its allocations is made resident whole,
            # and no kernel reads a page from the host (check_swap, SIMGPU_REPORT=1); um
            # leaves every one of them to demand paging, its learned schedule included,
            # and prefetches nothing (check_um): its learner plans none of them.
            trace = make_large_trace(Path(tmp))
            ref = reference(args, trace)
            case_oversubscribed(args, trace, "swap", ref)
            stats = case_oversubscribed(args, trace, "um", ref, um_prefetches=False)
            if stats is None or stats["schedule"]["pages"] != 0:
                fail("um's learner planned buffers larger than a quarter of the capacity: "
                     f"{stats and stats['schedule']}")
            print("um: the learner planned none of the buffers left to demand paging")
            return 0
        if args.case == "over":
            trace = make_over_trace(Path(tmp))
            ref = reference(args, trace)
            if largest_launch_bytes(ref["profile"], None) <= ref["peak"] / args.ratio:
                fail(f"--ratio {args.ratio}: the largest launch fits the device")
            stats = case_oversubscribed(args, trace, "swap", ref)
            s = stats["schedule"] if stats else {}
            oversized = stats["counters"]["swap_oversized"]["total"] if stats else 0
            if s.get("plan_failures") or not s.get("followed") or not oversized:
                fail(f"one launch over the room left no schedule, or none over it: {s}, "
                     f"swap_oversized {oversized}")
            print(f"swap: the schedule followed for {s['followed']} launches, "
                  f"{oversized} over the room")
            return 0
        if args.case == "trace":
            if args.trace is None:
                fail("--case trace needs --trace")
            ref = reference(args, args.trace)
            for mode in args.modes:
                if mode == "pool":
                    case_pool(args, args.trace, ref)
                else:
                    case_oversubscribed(args, args.trace, mode, ref)
            return 0
        trace = make_trace(args, Path(tmp))
        if args.case == "unlimited":
            case_unlimited(args, trace)
        elif args.case == "corrupt":
            case_corrupt(args, trace)
        else:
            case_oversubscribed(args, trace, args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
