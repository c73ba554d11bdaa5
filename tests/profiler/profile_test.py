#!/usr/bin/env python3
"""Profiler tests on simgpu with simtrain (meson suite 'profiler').

  buffers   simtrain profiled (--mode-args: '', '--caching', '--streams 2', ...): the
            period is found automatically and equals simtrain's launches per
            iteration; every launch of the learned iteration has the buffer set that
            simgpu's launch log (SIMGPU_LAUNCH_LOG: the allocations the kernel's own
            footprint touches) gives for the same launch, joined by position in the
            run and by CUPTI correlation id; durations come from CUPTI; losses are
            unchanged by profiling
  marker    OVERSUB_ITERATION_MARKER=squared_error_rows: the same period, every
            iteration starting at that kernel, buffer sets right
  corrupt   a good profile is accepted; with a flipped byte, truncated, or with a
            wrong magic it is refused by the Python reader, by `oversub report` (exit
            1) and by the library (OVERSUB_PROFILE_IN: a warning naming the reason,
            and the run goes on with the same losses)
  foreign   a profile of simtrain given to another program (simtrain's executable
            copied under another name) is refused by the library, the message naming
            the variable, the profile's program and this one, and the run goes on with
            the same losses; the same executable copied into another folder (same
            name) is still simtrain and its profile is used
  scripts   `oversub profile` then `oversub report`: summary lines, the Chrome trace
            parses as JSON with kernel (X), counter (C) and buffer-lifetime (b/e)
            events and their fields, the PNG is a PNG of the plot's size
  stop      `oversub profile --iterations 3` on a 40-iteration run stops it early
            with a profile of the right period
  driver    driver_launch_probe marks its iterations with oversub_iteration_begin()
            and launches through cuLaunchKernel (kernelParams, and a packed buffer
            whose struct argument holds two pointers) and cudaLaunchKernel: all three
            seen through CUPTI with the right buffer sets and the api period; with
            CUPTI held, only the runtime launch is seen, as the warning says
  library   library_launch_probe launches through __cudaLaunchKernel (CUPTI callback
            without params: taken from oversub's hook), a CUkernel of its own
            cuLibraryLoadData, and __cudaLaunchKernel again past oversub's hook (taken
            from the driver-level launch underneath), each with 8 KiB of tensor pointers
            by value: both seen through CUPTI with the buffer sets simgpu's footprint
            gives (pointers past 4 KiB included) and their kernels' correlation ids and
            durations; under swap mode on a device smaller than the buffers no kernel
            reaches a swapped-out page; with a library load and a kernel query failing,
            the program gets the same codes and results with liboversub as without
  unreadable
            no parameter layout can be read (SIMGPU_FAIL=param_info:1+: cudaFuncGetParamInfo,
            cuFuncGetParamInfo and cuKernelGetParamInfo all fail): driver_launch_probe's
            cuLaunchKernel (kernelParams and packed) and cudaLaunchKernel launches and
            library_launch_probe's __cudaLaunchKernel and CUkernel launches and
            simtrain's cuLaunchKernelEx launches (--launch ex) are each
            marked unreadable in the profile, with no buffers (the buffers live at them
            kept in the profile), and `oversub report`
            names every kernel with its count; with only the first query failing
            (param_info:1) simtrain's profile marks the launches of that one kernel and
            no other, whose buffer sets still equal simgpu's footprints
  fallback  another tool holds CUPTI (cupti_holder preloaded first): the library
            says who and what it then does not see, and the hooks still give every
            launch its right buffer set (no durations)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SIMTRAIN_ARGS = ["--depth", "6", "--width", "96", "--batch", "48"]
ITERS = 4
FINAL_RE = re.compile(r"^final loss: .*\(bits 0x([0-9a-f]{8})\)$", re.MULTILINE)
MARKER = "squared_error_rows"


def fail(msg: str) -> None:
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def check(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


class Ctx:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.a = args
        self.tmp = tmp
        sys.path.insert(0, str(Path(args.oversub).resolve().parent / "lib"))

    def simtrain(self, iters: int = ITERS, mode_args: str = "") -> list[str]:
        return [self.a.simtrain, *SIMTRAIN_ARGS, "--iters", str(iters), *shlex.split(mode_args)]

    def run(self, cmd: list[str], env: dict[str, str], preload: list[str] | None = None,
            timeout: int = 150) -> subprocess.CompletedProcess:
        e = dict(os.environ)
        e.update(env)
        if preload is not None:
            e["LD_PRELOAD"] = " ".join(preload)
        return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)

    def profiled(self, name: str, mode_args: str = "", env: dict[str, str] | None = None,
                 preload: list[str] | None = None, iters: int = ITERS):
        out = self.tmp / f"{name}.oprof"
        log = self.tmp / f"{name}.launches"
        e = {"OVERSUB_PROFILE_OUT": str(out), "SIMGPU_LAUNCH_LOG": str(log)}
        e.update(env or {})
        r = self.run(self.simtrain(iters, mode_args), e, preload or [self.a.lib])
        check(r.returncode == 0, f"simtrain under profiling exited {r.returncode}:\n{r.stderr}")
        check(out.exists(), f"no profile written:\n{r.stderr}")
        return r, out, log

    def plain_final(self, mode_args: str = "", iters: int = ITERS) -> str:
        r = self.run(self.simtrain(iters, mode_args), {})
        m = FINAL_RE.search(r.stdout)
        check(r.returncode == 0 and m is not None, f"plain simtrain failed:\n{r.stderr}")
        return m.group(1)


def read_log(path: Path) -> list[tuple[int, str, set[int]]]:
    rows = []
    for line in path.read_text().splitlines():
        f = [x for x in line.split() if not x.startswith("ns=")]  # the duration
        rows.append((int(f[0]), f[1], {int(x, 16) for x in f[2:]}))
    return rows


def source_name(mangled: str) -> str:
    m = re.match(r"_Z(\d+)", mangled)
    return mangled[m.end():m.end() + int(m.group(1))] if m else mangled


def check_buffer_sets(p, rows, cupti: bool) -> None:
    """Each launch of the profile against the launch log line at the same position."""
    from oprof import Profile  # noqa: F401
    check(p.first_launch + len(p.launches) <= len(rows),
          f"profile iteration [{p.first_launch}, +{len(p.launches)}) past the log's {len(rows)}")
    for i, launch in enumerate(p.launches):
        corr, mangled, truth = rows[p.first_launch + i]
        name = p.strings[launch.name]
        check(name.startswith(source_name(mangled) + "("),
              f"launch {i}: profile says {name}, simgpu ran {mangled}")
        got = {p.allocations[b].address for b in launch.buffers}
        check(got == truth, f"launch {i} ({name}): buffer set {sorted(map(hex, got))} != "
                            f"the kernel's footprint {sorted(map(hex, truth))}")
        if cupti:
            check(launch.correlation_id == corr,
                  f"launch {i}: correlation id {launch.correlation_id} != simgpu's {corr}")
        else:
            check(launch.correlation_id == 0 and launch.duration_ns == 0,
                  f"launch {i}: hooks cannot know correlation ids or durations")
    if cupti:
        # A tiny kernel can last under a nanosecond on the modelled device: most, not all.
        timed = sum(l.duration_ns > 0 for l in p.launches)
        check(timed * 2 > len(p.launches), f"only {timed} launches have a CUPTI duration")
    print(f"{len(p.launches)} launches: buffer sets equal simgpu's footprints")


def case_buffers(c: Ctx) -> None:
    from oprof import read_profile
    r, out, log = c.profiled("buffers", c.a.mode_args)
    rows = read_log(log)
    check(len(rows) % ITERS == 0, f"{len(rows)} launches is not {ITERS} equal iterations")
    per_iter = len(rows) // ITERS
    p = read_profile(out)
    check(p.source == "automatic", f"source {p.source}")
    check(len(p.launches) == per_iter,
          f"automatic period {len(p.launches)} launches, simtrain makes {per_iter} per iteration")
    check(p.iterations_seen >= ITERS - 1, f"only {p.iterations_seen} iterations seen")
    check(p.cupti, "launches not seen through CUPTI")
    check_buffer_sets(p, rows, cupti=True)
    check(any(not a.long_lived for a in p.allocations) or "--caching" in c.a.mode_args,
          "no per-iteration buffers found")
    check(all(a.call_site is not None for a in p.allocations), "allocation without call site")
    m = FINAL_RE.search(r.stdout)
    check(m is not None and m.group(1) == c.plain_final(c.a.mode_args),
          "profiling changed simtrain's final loss")
    print(f"period {per_iter} launches found automatically; losses unchanged")


def case_marker(c: Ctx) -> None:
    from oprof import read_profile
    _, out, log = c.profiled("marker", env={"OVERSUB_ITERATION_MARKER": MARKER})
    rows = read_log(log)
    p = read_profile(out)
    check(p.source == "marker" and p.marker == MARKER, f"source {p.source} marker {p.marker!r}")
    check(len(p.launches) == len(rows) // ITERS, f"marker period {len(p.launches)}")
    check(MARKER in p.strings[p.launches[0].name], "iteration does not start at the marker")
    check(sum(MARKER in p.strings[l.name] for l in p.launches) == 1, "marker twice in one iteration")
    check(p.iterations_seen == ITERS - 1, f"{p.iterations_seen} marked iterations")
    check_buffer_sets(p, rows, cupti=True)


def case_corrupt(c: Ctx) -> None:
    from oprof import ProfileError, decode
    _, good, _ = c.profiled("good")
    data = good.read_bytes()
    decode(data)
    final = c.plain_final()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x5A
    variants = {"flipped": (bytes(flipped), "checksum mismatch"),
                "truncated": (data[:-11], "truncated"),
                "magic": (b"NOTPROF!" + data[8:], "wrong magic")}
    r = c.run(c.simtrain(), {"OVERSUB_PROFILE_IN": str(good), "OVERSUB_LOG": "info"}, [c.a.lib])
    check(r.returncode == 0 and "profile: loaded" in r.stderr, f"good profile not loaded:\n{r.stderr}")
    for name, (blob, reason) in variants.items():
        path = c.tmp / f"{name}.oprof"
        path.write_bytes(blob)
        try:
            decode(blob)
            fail(f"{name}: the Python reader accepted it")
        except ProfileError as e:
            check(reason in str(e), f"{name}: Python reader said {e}")
        rep = subprocess.run([sys.executable, c.a.oversub, "report", str(path)],
                             capture_output=True, text=True)
        check(rep.returncode == 1 and reason in rep.stderr, f"{name}: report: {rep.stderr}")
        r = c.run(c.simtrain(), {"OVERSUB_PROFILE_IN": str(path)}, [c.a.lib])
        m = FINAL_RE.search(r.stdout)
        check(r.returncode == 0 and m is not None and m.group(1) == final,
              f"{name}: the run did not go on unchanged:\n{r.stderr}")
        check(f"{path} refused: " in r.stderr and reason in r.stderr and
              "running without it" in r.stderr, f"{name}: library said:\n{r.stderr}")
        print(f"{name}: refused ({reason}) by the reader, report and library; run unchanged")


def case_foreign(c: Ctx) -> None:
    import shutil
    _, good, _ = c.profiled("own")
    final = c.plain_final()
    other_dir, same_dir = c.tmp / "other", c.tmp / "elsewhere"
    other_dir.mkdir()
    same_dir.mkdir()
    other = other_dir / "othertrain"
    same = same_dir / Path(c.a.simtrain).name
    shutil.copy2(c.a.simtrain, other)
    shutil.copy2(c.a.simtrain, same)
    env = {"OVERSUB_PROFILE_IN": str(good), "OVERSUB_LOG": "info"}
    r = c.run([str(other), *c.simtrain()[1:]], env, [c.a.lib])
    m = FINAL_RE.search(r.stdout)
    check(r.returncode == 0 and m is not None and m.group(1) == final,
          f"the run with a foreign profile did not go on unchanged:\n{r.stderr}")
    want = (f"warning: profile: OVERSUB_PROFILE_IN={good} refused: it is a profile of "
            f"{Path(c.a.simtrain).resolve()}, and this program is {other.resolve()}; "
            f"running without it")
    check(want in r.stderr, f"expected\n  {want}\nin\n{r.stderr}")
    check("profile: loaded" not in r.stderr, f"the foreign profile was loaded:\n{r.stderr}")
    r = c.run([str(same), *c.simtrain()[1:]], env, [c.a.lib])
    m = FINAL_RE.search(r.stdout)
    check(r.returncode == 0 and m is not None and m.group(1) == final and
          "profile: loaded" in r.stderr and "refused" not in r.stderr,
          f"simtrain copied into another folder did not load its own profile:\n{r.stderr}")
    print("a profile of simtrain: refused by othertrain (run unchanged), loaded by simtrain "
          "from another folder")


def case_scripts(c: Ctx) -> None:
    out = c.tmp / "model.oprof"
    r = subprocess.run([sys.executable, c.a.oversub, "profile", "--lib", c.a.lib, "-o", str(out),
                        "--", *c.simtrain()], capture_output=True, text=True, timeout=150)
    check(r.returncode == 0 and out.exists(), f"oversub profile failed:\n{r.stderr}")
    check("iterations seen" in r.stderr and "wrote" in r.stderr, f"no progress:\n{r.stderr}")
    rep = subprocess.run([sys.executable, c.a.oversub, "report", str(out)], capture_output=True,
                         text=True, timeout=120)
    check(rep.returncode == 0, f"report failed:\n{rep.stderr}")
    for key in ("iteration:", "found automatically", "kernels per iteration:", "peak live bytes:",
                "bytes touched:", "reuse distance", "largest buffers:"):
        check(key in rep.stdout, f"report lacks {key!r}:\n{rep.stdout}")
    trace = json.loads((c.tmp / "model.trace.json").read_text())
    ev = trace["traceEvents"]
    kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    counters = [e for e in ev if e.get("ph") == "C"]
    begins = [e for e in ev if e.get("ph") == "b"]
    ends = [e for e in ev if e.get("ph") == "e"]
    check(kernels and all({"name", "ts", "dur", "pid", "tid"} <= e.keys() and e["dur"] > 0
                          for e in kernels), "kernel events lack fields")
    check(counters and all(e["name"] == "live bytes" and "bytes" in e["args"] for e in counters),
          "live-bytes counter missing")
    check(begins and len(begins) == len(ends) and all({"id", "cat", "ts", "name"} <= e.keys()
                                                     for e in begins + ends), "buffer spans")
    png = (c.tmp / "model.png").read_bytes()
    check(png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    w, h = struct.unpack(">II", png[16:24])
    check(w == 960 and h == 540 and len(png) > 2000, f"PNG {w}x{h}, {len(png)} bytes")
    print(rep.stdout)


def case_stop(c: Ctx) -> None:
    from oprof import read_profile
    out = c.tmp / "stop.oprof"
    r = subprocess.run([sys.executable, c.a.oversub, "profile", "--lib", c.a.lib, "-o", str(out),
                        "--iterations", "3", "--", *c.simtrain(40)],
                       capture_output=True, text=True, timeout=200)
    check(r.returncode == 0 and out.exists(), f"profile --iterations failed:\n{r.stderr}")
    check("stopped the command after 3 iterations" in r.stderr, f"not stopped:\n{r.stderr}")
    check("iter 39 " not in r.stdout, "the command ran to its end")
    p = read_profile(out)
    per_iter = len(read_log_free_count(c))
    check(len(p.launches) == per_iter, f"period {len(p.launches)} != {per_iter}")
    check(p.iterations_seen >= 3, f"{p.iterations_seen} iterations")


def read_log_free_count(c: Ctx) -> list:
    log = c.tmp / "count.launches"
    r = c.run(c.simtrain(1), {"SIMGPU_LAUNCH_LOG": str(log)})
    check(r.returncode == 0, "simtrain --iters 1 failed")
    return read_log(log)


def case_fallback(c: Ctx) -> None:
    from oprof import read_profile
    r, out, log = c.profiled("fallback", preload=[c.a.holder, c.a.lib])
    check("cuptiSubscribe_v2 -> 0" in r.stderr, f"the holder did not get CUPTI:\n{r.stderr}")
    check("CUPTI is held by another subscriber (CUPTI for holder-tool)" in r.stderr and
          "falling back to oversub's own launch hooks" in r.stderr and
          "cuLaunchKernel from cuBLAS" in r.stderr, f"no fallback message:\n{r.stderr}")
    rows = read_log(log)
    p = read_profile(out)
    check(not p.cupti, "profile claims CUPTI")
    check(len(p.launches) == len(rows) // ITERS, f"period {len(p.launches)}")
    check_buffer_sets(p, rows, cupti=False)


def case_driver(c: Ctx) -> None:
    from oprof import read_profile
    out, log = c.tmp / "driver.oprof", c.tmp / "driver.launches"
    env = {"OVERSUB_PROFILE_OUT": str(out), "SIMGPU_LAUNCH_LOG": str(log)}
    r = c.run([c.a.probe, "5"], env, [c.a.lib])
    check(r.returncode == 0 and "ok" in r.stdout, f"probe failed:\n{r.stderr}")
    p = read_profile(out)
    rows = read_log(log)
    check(p.source == "api", f"source {p.source}, want api (oversub_iteration_begin)")
    check(p.iterations_seen == 4, f"{p.iterations_seen} marked iterations, want 4")
    names = [p.strings[l.name].split("(")[0] for l in p.launches]
    check(names == ["axpy", "pair_sum", "axpy"], f"launches {names}")
    check_buffer_sets(p, rows, cupti=True)
    pair = p.launches[1]
    check(len(pair.buffers) == 3 and sum(not p.allocations[b].long_lived for b in pair.buffers) == 1,
          "pair_sum: the struct's two pointers and the per-iteration output")
    out.unlink()
    r = c.run([c.a.probe, "5"], env, [c.a.holder, c.a.lib])
    check(r.returncode == 0 and "falling back" in r.stderr, f"fallback run:\n{r.stderr}")
    p = read_profile(out)
    names = [p.strings[l.name].split("(")[0] for l in p.launches]
    check(not p.cupti and names == ["axpy"],
          f"with CUPTI held only the runtime launch is seen, got {names}")
    print("driver-level launches seen through CUPTI, not through the hooks")


HOST_MAPPED_RE = re.compile(r"kernel bytes in host-located mappings (\d+)")


def case_library(c: Ctx) -> None:
    from oprof import read_profile
    out, log = c.tmp / "library.oprof", c.tmp / "library.launches"
    env = {"OVERSUB_PROFILE_OUT": str(out), "SIMGPU_LAUNCH_LOG": str(log)}
    r = c.run([c.a.probe, "5"], env, [c.a.lib])
    check(r.returncode == 0 and "ok" in r.stdout, f"probe failed:\n{r.stdout}{r.stderr}")
    p = read_profile(out)
    rows = read_log(log)
    check(p.cupti, "launches not seen through CUPTI")
    check(p.source == "api", f"source {p.source}, want api (oversub_iteration_begin)")
    names = [p.strings[l.name].split("(")[0] for l in p.launches]
    check(names == ["tensor_sum", "lib_sum", "tensor_sum"], f"launches {names}")
    check_buffer_sets(p, rows, cupti=True)
    for l in p.launches:
        check(len(l.buffers) == 10, f"{p.strings[l.name]}: {len(l.buffers)} buffers, want 10 "
                                    "(one in the first 4 KiB, eight past it, the output)")
        check(l.duration_ns > 0, f"{p.strings[l.name]}: no kernel duration from CUPTI")
    print("__cudaLaunchKernel and cuLibrary launches tied to their records, 8 KiB scanned")

    # Swap mode: 20 buffers of 2 MiB (one VMM page each) on a 32 MiB device; each
    # launch needs 10 at once.
    buf, device = 2 << 20, 32 << 20
    swap_env = {"SIMGPU_MEMORY": str(device), "SIMGPU_REPORT": "1", "SIMGPU_RACE": "abort",
                "OVERSUB_MODE": "swap"}
    alone = c.run([c.a.probe, "4", str(buf)], {"SIMGPU_MEMORY": str(device)})
    check(alone.returncode != 0, "the probe should not fit the device without oversub")
    r = c.run([c.a.probe, "4", str(buf)], swap_env, [c.a.lib])
    check(r.returncode == 0 and "ok" in r.stdout, f"probe under swap failed:\n{r.stdout}{r.stderr}")
    m = HOST_MAPPED_RE.search(r.stderr)
    check(m is not None, f"no simgpu exit report:\n{r.stderr}")
    check(int(m.group(1)) == 0,
          f"kernels reached {m.group(1)} bytes of swapped-out pages (pointers past 4 KiB unseen?)")
    print("swap: every buffer behind the 8 KiB blocks resident before its kernel")

    # Faults: CUDA's codes reach the program through oversub, nothing corrupted.
    fail_env = {"SIMGPU_FAIL": "library_load:1,kernel_query:1"}
    plain = c.run([c.a.probe, "3", "4096", "faults"], fail_env)
    under = c.run([c.a.probe, "3", "4096", "faults"], fail_env, [c.a.lib])
    check(plain.returncode == 0 and plain.stdout ==
          "cuLibraryLoadData 2 then 0\ncuLibraryGetKernel 500 then 0\nok\n",
          f"probe with faults, alone:\n{plain.stdout}{plain.stderr}")
    check(under.returncode == 0 and under.stdout == plain.stdout,
          f"probe with faults under liboversub:\n{under.stdout}{under.stderr}")
    print("failed library loads and kernel queries: the same codes and results under oversub")


UNREADABLE_RE = re.compile(r"^  unreadable: (.*): (\d+) launch(?:es)? in the iteration, taken "
                           r"to touch any page in swap mode", re.MULTILINE)


def report_unreadable(c: Ctx, path: Path) -> dict[str, int]:
    """`oversub report`'s unreadable lines: kernel name -> count."""
    rep = subprocess.run([sys.executable, c.a.oversub, "report", str(path)],
                         capture_output=True, text=True)
    check(rep.returncode == 0, f"report of {path.name}: exit {rep.returncode}: {rep.stderr}")
    return {m.group(1): int(m.group(2)) for m in UNREADABLE_RE.finditer(rep.stdout)}


def unreadable_counts(p) -> dict[str, int]:
    counts: dict[str, int] = {}
    for launch in p.launches:
        if launch.unreadable:
            counts[p.strings[launch.name]] = counts.get(p.strings[launch.name], 0) + 1
    return counts


def case_unreadable(c: Ctx) -> None:
    from oprof import read_profile
    every = {"SIMGPU_FAIL": "param_info:1+"}
    # Runtime and driver launches (kernelParams, packed), then CUkernel launches.
    for probe, want in ((c.a.probe, {"axpy": 2, "pair_sum": 1}),
                        (c.a.library_probe, {"tensor_sum": 2, "lib_sum": 1})):
        out = c.tmp / f"{Path(probe).name}.oprof"
        r = c.run([probe, "5"], {"OVERSUB_PROFILE_OUT": str(out), **every}, [c.a.lib])
        check(r.returncode == 0 and "ok" in r.stdout, f"{probe} failed:\n{r.stdout}{r.stderr}")
        p = read_profile(out)
        check(p.cupti and p.source == "api", f"{probe}: cupti {p.cupti}, source {p.source}")
        names = [p.strings[l.name].split("(")[0] for l in p.launches]
        check(sorted(set(names)) == sorted(want), f"{probe}: launches {names}")
        for launch, name in zip(p.launches, names):
            check(launch.unreadable and launch.buffers == [],
                  f"{probe}: {name}: flags {launch.flags}, buffers {launch.buffers}: want "
                  "marked unreadable with no buffers")
        check(any(a.long_lived for a in p.allocations),
              f"{probe}: the long-lived buffers live at the marked launches are not in the "
              "profile")
        got = {k.split("(")[0]: v for k, v in report_unreadable(c, out).items()}
        check(got == want, f"{probe}: report says {got}, want {want}")
        check(got == {k.split("(")[0]: v for k, v in unreadable_counts(p).items()},
              f"{probe}: report {got} and profile disagree")
        print(f"{Path(probe).name}: every launch marked unreadable; report: {got}")

    # simtrain launching through cuLaunchKernelEx: every launch marked, counted per kernel.
    _, out, _ = c.profiled("ex", "--launch ex", env=every)
    p = read_profile(out)
    check(all(l.unreadable and not l.buffers for l in p.launches),
          "--launch ex: a launch not marked unreadable")
    counts = unreadable_counts(p)
    check(sum(counts.values()) == len(p.launches) and report_unreadable(c, out) == counts,
          f"--launch ex: report {report_unreadable(c, out)}, profile {counts}")
    print(f"simtrain --launch ex: {len(p.launches)} launches of {len(counts)} kernels marked")

    # Only the first layout query of the run fails: one kernel marked, the rest read.
    _, out, log = c.profiled("first", env={"SIMGPU_FAIL": "param_info:1"})
    p = read_profile(out)
    counts = unreadable_counts(p)
    check(len(counts) == 1, f"param_info:1: kernels marked {counts}, want exactly one")
    (name, count), = counts.items() if len(counts) == 1 else ((None, 0),)
    total = sum(p.strings[l.name] == name for l in p.launches)
    check(count == total, f"{name}: {count} of its {total} launches marked")
    check(report_unreadable(c, out) == counts,
          f"report says {report_unreadable(c, out)}, profile {counts}")
    rows = read_log(log)
    readable = 0
    for i, launch in enumerate(p.launches):
        if launch.unreadable:
            check(launch.buffers == [], f"launch {i} ({name}): marked but has buffers")
            continue
        readable += 1
        truth = rows[p.first_launch + i][2]
        got = {p.allocations[b].address for b in launch.buffers}
        check(got == truth, f"launch {i} ({p.strings[launch.name]}): buffer set differs "
                            "from simgpu's footprint")
    check(readable > 0, "no launch left readable")
    print(f"param_info:1: only {name} marked ({count} launches), {readable} launches read")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True,
                    choices=["buffers", "marker", "corrupt", "foreign", "scripts", "stop", "fallback",
                             "driver", "library", "unreadable"])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simtrain", required=True)
    ap.add_argument("--oversub", required=True)
    ap.add_argument("--holder")
    ap.add_argument("--probe")
    ap.add_argument("--library-probe")
    ap.add_argument("--mode-args", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oversub-profile-") as tmp:
        c = Ctx(args, Path(tmp))
        globals()[f"case_{args.case}"](c)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
