#!/usr/bin/env python3
"""simtrain's PyTorch-like variants on simgpu, alone and under liboversub.

The variants (tests/workloads/README.md, Note [PyTorch-like variants] in simtrain.cu):
  graphs          --graphs: the step captured once, replayed with cudaGraphLaunch
  graph-layers    --graphs --graph-layers 4: eight graphs replayed in turn (one stream)
  pointer-arrays  --pointer-arrays: Adam chases a device array of pointers
  foreach         --foreach: Adam over a tensor list in a >4 KiB parameter block
  expandable      --caching expandable: the program maps its own VMM segments

Cases:
  plain     the variant with plenty of memory, SIMGPU_RACE=abort, on 1 and 2 streams:
            loss bits identical to the plain run (no variant flag), and the same on
            both stream counts
  oversub   the variant under LD_PRELOAD=liboversub.so OVERSUB_MODE=--mode with
            SIMGPU_RACE=abort and SIMGPU_REPORT=1: for swap and um on a device of the
            unlimited run's peak / --ratio (where the variant alone runs out of
            memory), for pool with plenty of memory (pool mode does not
            oversubscribe); loss bits identical to the unlimited run's (itself run
            with SIMGPU_RACE=abort); oversub's statistics pass
            tests/preload/swap_checks.py. With --expect-failure REGEX the case must
            fail with a message (or output) matching REGEX: a known oversub bug,
            recorded so that the test flips to failing, "passes now", once fixed
  randprog  randprog --pointer-arrays 1 (every weight update finds its weights in a
            device pointer table) with plenty of memory (checksums those of
            --pointer-arrays 0), then at its peak / --ratio under --mode (swap or um):
            the same checksums, SIMGPU_RACE=abort
  choice    graph-layers over 14 iterations at 3x under --mode (swap or um) with
            OVERSUB_VERBOSE=1: the timed trial of Note [Fetch or reach, by
            measurement] (core/graph_footprint.h) chose the way it measured faster
            and said so; loss bits identical
  matrix    every variant x mode (--modes: pool, swap, um) x ratio (--ratios) x
            streams (1, 2; graph-layers 1) as `oversub`, one line per case and a table at the end;
            exit 1 if any failed (by hand or from scripts: 10-40 s a case)

  pytorch_like_test.py --case plain --variant graphs --simtrain build/tests/workloads/simtrain
  pytorch_like_test.py --case oversub --variant foreach --mode swap --ratio 3 --streams 2 \\
      --simtrain ... --lib build/interpose/liboversub.so
  pytorch_like_test.py --case matrix --ratios 1.5,3,10 --simtrain ... --lib ...
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "preload"))
import swap_checks  # noqa: E402
from swap_checks import LOSS_BITS_RE, OOM_RE, PEAK_BYTES_RE, check_swap, check_um, read_stats, run  # noqa: E402

VARIANTS = {
    "graphs": ["--graphs"],
    # torch.compile's split: a graph every 4 layers of each pass, replayed in turn.
    "graph-layers": ["--graphs", "--graph-layers", "4"],
    "pointer-arrays": ["--pointer-arrays"],
    "foreach": ["--foreach"],
    "expandable": ["--caching", "expandable"],
}
# swap_test.py's "chain": at 3x the largest launch has room. --foreach touches the
# four buffers of 7 layers in one launch on simgpu (kForeachTensorsPerLaunch): 28 MiB
# with chain's 1 MiB layers, more than a device of chain's peak / 3, so it gets many
# narrow layers.
CONFIGS = {
    "chain": ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "3"],
    "many": ["--depth", "64", "--width", "128", "--batch", "256", "--iters", "3"],
    # swap_test.py's "deep", for 10x: chain's peak / 10 leaves a 1 MiB buffer's memset
    # no room in 2 MiB pages.
    "deep": ["--depth", "32", "--width", "512", "--batch", "16", "--iters", "3"],
}
CONFIG_OF = {"graphs": "chain", "graph-layers": "deep", "pointer-arrays": "chain",
             "foreach": "many", "expandable": "chain"}
# Variants that run on one stream only.
ONE_STREAM = {"graph-layers"}
# Smaller for the plain case (no oversubscription to reach).
PLAIN_CONFIG = ["--depth", "6", "--width", "96", "--batch", "48", "--iters", "4"]
MiB = 1 << 20


class Failure(Exception):
    def __init__(self, message: str, proc=None) -> None:
        if proc is not None:
            message += f"\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}---"
        super().__init__(message)


def losses(proc, what: str) -> list[str]:
    if proc.returncode != 0:
        raise Failure(f"{what} failed (exit {proc.returncode})", proc)
    bits = LOSS_BITS_RE.findall(proc.stdout)
    if not bits:
        raise Failure(f"{what} printed no losses", proc)
    return bits


def case_plain(simtrain: Path, variant: str) -> str:
    by_streams = {}
    for streams in ("1", "2"):
        if streams != "1" and variant in ONE_STREAM:
            continue
        base_cmd = [str(simtrain), *PLAIN_CONFIG, "--streams", streams]
        want = losses(run(base_cmd, {"SIMGPU_RACE": "abort"}, None), "the plain run")
        proc = run(base_cmd + VARIANTS[variant], {"SIMGPU_RACE": "abort"}, None)
        got = losses(proc, f"--{variant} on {streams} stream(s)")
        if got != want:
            raise Failure(f"--{variant} --streams {streams}: loss bits {got} != plain {want}", proc)
        if variant == "expandable":
            peak = int(PEAK_BYTES_RE.search(proc.stdout).group(1))
            if peak == 0 or peak % (2 * MiB) != 0:
                raise Failure(f"expandable segments hold whole 2 MiB pages, peak {peak}", proc)
        by_streams[streams] = got
    if len(by_streams) == 2 and by_streams["1"] != by_streams["2"]:
        raise Failure(f"--{variant}: 1 and 2 streams differ: {by_streams}")
    return f"--{variant}: loss bits identical to the plain run on 1 and 2 streams"


def run_same_bits(cmd: list[str], settings: dict, lib: Path, want: list[str], variant: str,
                  where: str):
    """cmd under the library with settings: exits 0 with the loss bits want."""
    proc = run(cmd, settings, lib)
    if proc.returncode != 0:
        raise Failure(f"--{variant} fails under {where} (exit {proc.returncode})", proc)
    got = LOSS_BITS_RE.findall(proc.stdout)
    if got != want:
        raise Failure(f"--{variant}: loss bits differ under {where}: {got} != {want}", proc)
    return proc


def case_oversub(simtrain: Path, lib: Path, variant: str, mode: str, ratio: float,
                 streams: str, check_plain: bool = False) -> str:
    config = CONFIG_OF[variant]
    if config == "chain" and ratio >= 10:
        config = "deep"
    base_cmd = [str(simtrain), *CONFIGS[config], "--streams", streams]
    cmd = base_cmd + VARIANTS[variant]
    ref = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    want = losses(ref, f"--{variant} with plenty of memory")
    if check_plain:
        plain = losses(run(base_cmd, {}, None), "the plain run")
        if want != plain:
            raise Failure(f"--{variant} with plenty of memory: {want} != plain {plain}", ref)
    peak = int(PEAK_BYTES_RE.search(ref.stdout).group(1))
    settings = {"SIMGPU_RACE": "abort", "SIMGPU_REPORT": "1", "OVERSUB_MODE": mode,
                "OVERSUB_STATS": "json"}
    device = None
    if mode != "pool":
        device = int(peak / ratio)
        alone = run(cmd, {"SIMGPU_MEMORY": str(device)}, None)
        if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
            raise Failure(f"without oversub --{variant} should run out of memory on {device} "
                          "bytes", alone)
        settings["SIMGPU_MEMORY"] = str(device)
    where = f"OVERSUB_MODE={mode}" + (f" at {ratio}x" if device else "") + f", {streams} stream(s)"
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        settings["OVERSUB_STATS_FILE"] = str(stats_file)
        proc = run_same_bits(cmd, settings, lib, want, variant, where)
        stats = read_stats(stats_file, proc)
    if mode == "swap":
        # The chased buffers and the sub-allocated ones are not all found whole by
        # the argument scan: a kernel may reach a swapped-out page (slow, not wrong).
        # One graph holding the whole step is larger than the capacity: its replays
        # reach on the host what is not resident, and need not fetch anything (Note [A
        # graph's footprint] in core/graph_footprint.h).
        moved = check_swap(stats, proc, device, False, False,
                           expect_fetches=variant != "graphs")
    elif mode == "um":
        moved = check_um(stats, device)
    else:
        counters = stats["counters"]
        if counters["allocations"]["current"] != 0:
            raise Failure(f"allocations left live: {counters['allocations']}", proc)
        moved = "pool served the run"
    if variant == "graph-layers" and mode != "pool":
        # Replays of a graph that fits make its footprint resident first (at 10x some
        # of the four-layer graphs do not fit, and are reached on the host).
        prefetched = stats["counters"]["graph_replays_prefetched"]["total"]
        graph_launches = stats["counters"]["graph_launches"]["total"]
        if prefetched == 0 or (ratio < 10 and prefetched != graph_launches):
            raise Failure(f"--{variant} under {where}: {prefetched} of {graph_launches} "
                          "replays prefetched their footprint", proc)
        moved += f"; {prefetched} of {graph_launches} replays prefetched their footprint"
    return (f"--{variant} under {where}: peak {peak} bytes, loss bits identical over "
            f"{len(want)} iterations; {moved}")


CHOICE_RE = re.compile(r"oversub: graph replays: a cycle of them took ([0-9.]+) ms on the device "
                       r"fetching each footprint first and ([0-9.]+) ms (?:reaching it on the "
                       r"host|leaving it to demand paging); from now on they (.*)$", re.M)


def case_choice(simtrain: Path, lib: Path, mode: str) -> str:
    """--graph-layers over 14 iterations at 3x: the timed trial (cycles 1-8) chose
    fetching or not and said so with OVERSUB_VERBOSE=1; the loss bits are those of the
    run with plenty of memory."""
    cmd = [str(simtrain), *CONFIGS["deep"], "--streams", "1", *VARIANTS["graph-layers"]]
    cmd[cmd.index("--iters") + 1] = "14"
    ref = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    want = losses(ref, "--graph-layers with plenty of memory")
    peak = int(PEAK_BYTES_RE.search(ref.stdout).group(1))
    settings = {"SIMGPU_RACE": "abort", "OVERSUB_MODE": mode, "OVERSUB_VERBOSE": "1",
                "SIMGPU_MEMORY": str(int(peak / 3))}
    proc = run_same_bits(cmd, settings, lib, want, "graph-layers", f"OVERSUB_MODE={mode} at 3x")
    choices = CHOICE_RE.findall(proc.stdout + proc.stderr)
    if len(choices) != 1:
        raise Failure(f"want one choice line from the timed trial, got {len(choices)}", proc)
    fetch, other, way = choices[0]
    if (way == "fetch it") != (float(fetch) <= float(other)):
        raise Failure(f"the trial measured {fetch} ms fetching, {other} ms not, and chose "
                      f"'{way}'", proc)
    return (f"--graph-layers under {mode} at 3x, 14 iterations: {fetch} ms a cycle fetching, "
            f"{other} ms not; they {way}; loss bits identical")


CHECKSUM_RE = re.compile(r"^iter \d+ checksum .*$", re.M)
RANDPROG_CONFIG = ["--layers", "180", "--iters", "3", "--max-kib", "1024"]


def case_randprog(randprog: Path, lib: Path, mode: str, ratio: float, seed: str,
                  streams: str) -> str:
    base = [str(randprog), "--seed", seed, *RANDPROG_CONFIG, "--streams", streams]
    cmd = base + ["--pointer-arrays", "1"]
    ref = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    want = CHECKSUM_RE.findall(ref.stdout)
    if ref.returncode != 0 or not want:
        raise Failure("randprog --pointer-arrays 1 fails with plenty of memory", ref)
    plain = run(base, {}, None)
    if CHECKSUM_RE.findall(plain.stdout) != want:
        raise Failure("randprog's checksums differ with --pointer-arrays 1", plain)
    peak = int(PEAK_BYTES_RE.search(ref.stdout).group(1))
    device = int(peak / ratio)
    alone = run(cmd, {"SIMGPU_MEMORY": str(device)}, None)
    if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
        raise Failure(f"without oversub randprog should run out of memory on {device} bytes",
                      alone)
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run(cmd, {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                         "SIMGPU_REPORT": "1", "OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
                         "OVERSUB_STATS_FILE": str(stats_file)}, lib)
        where = f"OVERSUB_MODE={mode} at {ratio}x, {streams} stream(s)"
        if proc.returncode != 0:
            raise Failure(f"randprog --pointer-arrays 1 fails under {where} "
                          f"(exit {proc.returncode})", proc)
        if CHECKSUM_RE.findall(proc.stdout) != want:
            raise Failure(f"randprog --pointer-arrays 1: checksums differ under {where}", proc)
        stats = read_stats(stats_file, proc)
    moved = check_swap(stats, proc, device, False, False) if mode == "swap" else check_um(stats, device)
    return (f"randprog --seed {seed} --pointer-arrays 1 under {where}: peak {peak} bytes, "
            f"checksums identical over {len(want)} iterations; {moved}")


def attempt(fn, *args) -> tuple[bool, str]:
    """(passed, the case's line or its failure's first lines)."""
    failed: list[str] = []
    original = swap_checks.fail

    def record(message: str, proc=None):  # swap_checks.fail exits; turn it into a Failure
        raise Failure(message, proc)

    swap_checks.fail = record
    try:
        return True, fn(*args)
    except Failure as failure:
        failed.append(str(failure))
    finally:
        swap_checks.fail = original
    return False, failed[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["plain", "oversub", "randprog", "matrix", "choice"],
                    required=True)
    ap.add_argument("--simtrain", type=Path, help="simtrain (plain, oversub, matrix)")
    ap.add_argument("--randprog", type=Path, help="randprog (randprog)")
    ap.add_argument("--seed", default="1", help="randprog: its seed")
    ap.add_argument("--lib", type=Path, help="liboversub.so (oversub, matrix)")
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    ap.add_argument("--mode", choices=["pool", "swap", "um"], default="swap")
    ap.add_argument("--ratio", type=float, default=3.0, help="peak / device memory")
    ap.add_argument("--streams", choices=["1", "2"], default="1")
    ap.add_argument("--ratios", default="1.5,3,10", help="matrix: the ratios")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="matrix: the variants")
    ap.add_argument("--modes", default="pool,swap,um", help="matrix: the OVERSUB_MODEs")
    ap.add_argument("--check-plain", action="store_true",
                    help="matrix: also compare each variant's bits with the plain run's")
    ap.add_argument("--expect-failure", metavar="REGEX",
                    help="oversub: a known bug; the case must fail matching REGEX")
    args = ap.parse_args()
    if args.case in ("plain", "oversub") and args.variant is None:
        ap.error("--variant is needed")
    if (args.case == "randprog") != (args.randprog is not None) or \
            (args.case != "randprog" and args.simtrain is None):
        ap.error("--randprog goes with --case randprog, --simtrain with the others")
    if args.case != "plain" and args.lib is None:
        ap.error("--lib is needed")
    if args.case == "plain":
        ok, line = attempt(case_plain, args.simtrain, args.variant)
    elif args.case == "choice":
        ok, line = attempt(case_choice, args.simtrain, args.lib.resolve(), args.mode)
    elif args.case in ("oversub", "randprog"):
        if args.case == "oversub":
            ok, line = attempt(case_oversub, args.simtrain, args.lib.resolve(), args.variant,
                               args.mode, args.ratio, args.streams)
        else:
            ok, line = attempt(case_randprog, args.randprog, args.lib.resolve(), args.mode,
                               args.ratio, args.seed, args.streams)
        if args.expect_failure is not None:
            if ok:
                print(f"FAIL: passes now (known failure /{args.expect_failure}/ fixed: drop "
                      f"--expect-failure from its meson test): {line}")
                return 1
            if not re.search(args.expect_failure, line):
                print(f"FAIL: fails, but not with the known failure /{args.expect_failure}/:"
                      f"\n{line}")
                return 1
            print(f"known failure, as expected (/{args.expect_failure}/):\n{line}")
            return 0
    else:
        rows = []
        for variant in args.variants.split(","):
            for mode in args.modes.split(","):
                for ratio in ([0.0] if mode == "pool" else [float(r) for r in args.ratios.split(",")]):
                    for streams in ("1",) if variant in ONE_STREAM else ("1", "2"):
                        ok, line = attempt(case_oversub, args.simtrain, args.lib.resolve(),
                                           variant, mode, ratio, streams, args.check_plain)
                        first = line.splitlines()[0]
                        print(f"{'PASS' if ok else 'FAIL'}: {first}", flush=True)
                        if not ok:
                            evidence = [l for l in line.splitlines()
                                        if l.startswith(("oversub:", "simtrain:", "simgpu: race",
                                                         "simgpu: kernel"))]
                            for l in evidence[:4]:
                                print(f"    {l}")
                        rows.append((variant, mode, "-" if mode == "pool" else f"{ratio:g}x",
                                     streams, ok, first))
        print("\n| variant | mode | ratio | streams | result |\n|---|---|---|---|---|")
        for variant, mode, ratio, streams, ok, first in rows:
            print(f"| {variant} | {mode} | {ratio} | {streams} | {'pass' if ok else 'FAIL'} |")
        return 0 if all(r[4] for r in rows) else 1
    print(("" if ok else "FAIL: ") + line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
