#!/usr/bin/env python3
"""The two readers of profile files agree (meson suites 'unit' and 'profiler').

scripts/lib/oprof.py (Python) and profiler/profile_format.cc (C++, through
oprof_check) are given the same files and must accept or refuse each alike, with
the same message (docs/profile-format.md, "Validation"):

  - a version 2 profile with a launch marked unreadable round-trips in Python, and
    the C++ writer re-encodes it byte for byte;
  - the same profile as version 1 writes it (no flags byte) is read by both, every
    launch with flags 0; a shipped trace under traces/ (version 2, source recorded) is
    read by both alike;
  - a launch flag with an unknown bit set is refused by both ("corrupt payload:
    launch flags"); so are versions 0 and 3, and an iteration source past 3
    (3: recorded off the GPU, read by both);
  - every byte flipped, every byte flipped with the checksum made right again (so
    the payload's own checks are reached), and every truncation, of both versions:
    the two readers give the same answer for each file;
  - `oversub report` names each kernel with unreadable launches and their count;
    says of a recording (source recorded) that its durations are modeled and no link
    was measured; wraps max idle around the iteration for long-lived buffers only.
"""
from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "scripts" / "lib"))
import oprof  # noqa: E402
from oprof import (LAUNCH_UNREADABLE, Allocation, Copy, Frame, Launch, Profile,  # noqa: E402
                   ProfileError, decode, encode)

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def sample() -> Profile:
    """The C++ unit test's sample (tests/unit/profiler/profile_format_test.cc)."""
    p = Profile("marker", True, 7, 1000, 600, "adam", "/usr/bin/python3",
                80 << 30, 50_000_000_000, 40_000_000_000, 123456)
    p.strings = ["/lib/libtorch.so", "at::empty", "gemm(float*)", "relu(float*)", "adam(float*)"]
    p.call_sites = [[Frame(0, 0x1234, 1), Frame(0, 0x99, oprof.NO_INDEX)]]
    p.allocations = [Allocation(0, 4096, 0x7F0000000000, 1, 3, False, 0),
                     Allocation(None, 1 << 20, 0x7F0000100000, 0, None, True, None)]
    p.launches = [Launch(2, 1500, 42, [0, 1]), Launch(3, 0, 43, [], LAUNCH_UNREADABLE),
                  Launch(4, 20, 44, [1])]
    p.copies = [Copy(0, "h2d", 4096, 900, 0), Copy(3, "memset", 64, 0, None)]
    return p


def with_crc(data: bytes) -> bytes:
    """data with its header's payload length and CRC made right."""
    payload = data[oprof.HEADER_BYTES:]
    return (data[:16] + struct.pack("<QI", len(payload), zlib.crc32(payload)) + data[28:])


def as_version_1(p: Profile) -> bytes:
    """p as version 1 writes it: no flags byte after each launch's buffer table."""
    head = Profile(**{**p.__dict__, "launches": [], "copies": []})
    launches_at = len(encode(head)) - 8  # before the two empty table counts
    v2 = encode(p)
    out = bytearray(v2[:launches_at + 4])
    at = launches_at + 4
    for launch in p.launches:
        record = 20 + 4 * len(launch.buffers)
        out += v2[at:at + record]
        at += record + 1
    out += v2[at:]
    out[8:12] = struct.pack("<I", 1)
    return with_crc(bytes(out))


def python_answer(data: bytes) -> str:
    try:
        p = decode(data)
    except ProfileError as e:
        return f"refused: {e}"
    flags = ",".join(str(launch.flags) for launch in p.launches)
    return (f"ok launches {len(p.launches)} unreadable "
            f"{sum(launch.unreadable for launch in p.launches)} flags {flags}")


def cxx_answers(check_exe: Path, paths: list[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i in range(0, len(paths), 500):  # keep the command line short
        r = subprocess.run([str(check_exe), *map(str, paths[i:i + 500])],
                           capture_output=True, text=True, check=True)
        for line in r.stdout.splitlines():
            path, answer = line.split(": ", 1)
            out[path] = answer
    return out


def agree(check_exe: Path, tmp: Path, files: dict[str, bytes]) -> None:
    """Both readers give the same answer for each file."""
    paths = []
    for name, data in files.items():
        path = tmp / f"{name}.oprof"
        path.write_bytes(data)
        paths.append(path)
    cxx = cxx_answers(check_exe, paths)
    differ = 0
    for name, path in zip(files, paths):
        py = python_answer(files[name])
        if cxx.get(str(path)) != py:
            differ += 1
            if differ <= 5:
                check(False, f"{name}: C++ says {cxx.get(str(path))!r}, Python says {py!r}")
    check(differ == 0, f"{differ} of {len(files)} files answered differently")


def variants(good: bytes, tag: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x10
        out[f"{tag}-flip{i}"] = bytes(bad)
        if i >= oprof.HEADER_BYTES:
            out[f"{tag}-flipcrc{i}"] = with_crc(bytes(bad))
    for n in range(len(good)):
        out[f"{tag}-cut{n}"] = good[:n]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", required=True, type=Path, help="the oprof_check executable")
    ap.add_argument("--oversub", required=True, type=Path, help="scripts/oversub")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oversub-oprof-") as t:
        tmp = Path(t)
        p = sample()
        v2 = encode(p)
        check(v2[8] == 2, "the Python writer writes version 2")
        back = decode(v2)
        check(back == p, "a version 2 profile round-trips in Python")
        check([launch.unreadable for launch in back.launches] == [False, True, False],
              "the unreadable flag is read back")
        (tmp / "v2.oprof").write_bytes(v2)
        r = subprocess.run([str(args.check), "--rewrite", str(tmp / "v2.oprof"),
                            str(tmp / "v2-cxx.oprof")], capture_output=True, text=True)
        check(r.returncode == 0 and (tmp / "v2-cxx.oprof").read_bytes() == v2,
              f"the C++ writer re-encodes the Python writer's file byte for byte {r.stderr}")

        v1 = as_version_1(p)
        check(len(v1) == len(v2) - len(p.launches) and v1[8] == 1, "version 1 bytes")
        old = decode(v1)
        check(all(launch.flags == 0 for launch in old.launches), "version 1 launches have flags 0")
        check(python_answer(v1) == "ok launches 3 unreadable 0 flags 0,0,0",
              f"version 1: {python_answer(v1)}")
        shipped = sorted((REPO / "traces").glob("*.oprof"))
        check(bool(shipped), "no shipped traces under traces/")
        for path in shipped[:2]:
            data = path.read_bytes()
            check(data[8] == 2 and decode(data).source == "recorded",
                  f"{path.name}: shipped as version 2, source recorded")
            check(python_answer(data).startswith("ok "), f"{path.name}: {python_answer(data)}")
            cxx = cxx_answers(args.check, [path])[str(path)]
            check(cxx == python_answer(data), f"{path.name}: C++ {cxx}, Python {python_answer(data)}")

        # Unknown flag bits: the last launch's flags byte sits just before the copies.
        flags_at = len(v2) - (4 + 25 * len(p.copies)) - 1
        check(v2[flags_at] == 0, "the last launch's flags byte")
        unknown: dict[str, bytes] = {}
        for bit in range(1, 8):
            bad = bytearray(v2)
            bad[flags_at] = 1 << bit
            unknown[f"flag{bit}"] = with_crc(bytes(bad))
            bad[flags_at] |= LAUNCH_UNREADABLE
            unknown[f"flag{bit}u"] = with_crc(bytes(bad))
        for name, data in unknown.items():
            check(python_answer(data) == "refused: corrupt payload: launch flags",
                  f"{name}: {python_answer(data)}")
        try:
            bad_launch = sample()
            bad_launch.launches[0].flags = 2
            encode(bad_launch)
            check(False, "the Python writer wrote an unknown launch flag")
        except ProfileError as e:
            check(str(e) == "corrupt payload: launch flags", f"writer: {e}")
        # The iteration source: 3 (recorded off the GPU) is read by both, 4 refused.
        check(v2[oprof.HEADER_BYTES] == oprof.SOURCES.index("marker"), "the source byte")
        recorded = sample()
        recorded.source = "recorded"
        check(decode(encode(recorded)).source == "recorded", "source recorded round-trips")
        for source in (3, 4, 255):
            bad = bytearray(v2)
            bad[oprof.HEADER_BYTES] = source
            unknown[f"source{source}"] = with_crc(bytes(bad))
        check(python_answer(unknown["source3"]).startswith("ok "), python_answer(unknown["source3"]))
        check(python_answer(unknown["source4"]) == "refused: corrupt payload: summary flags",
              python_answer(unknown["source4"]))
        for version in (0, 3):
            unknown[f"version{version}"] = v2[:8] + struct.pack("<I", version) + v2[12:]
        check(python_answer(unknown["version3"]) ==
              "refused: format version 3, this reader knows versions 1 and 2",
              python_answer(unknown["version3"]))
        agree(args.check, tmp, unknown)

        # Every flip and cut of both versions: the same answer from both readers.
        for good, tag in ((v2, "v2"), (v1, "v1")):
            files = variants(good, tag)
            agree(args.check, tmp, files)
            accepted = [n for n, d in files.items()
                        if "flipcrc" not in n and not python_answer(d).startswith("refused")]
            check(not accepted, f"{tag}: flipped or cut files accepted: {accepted[:5]}")
            print(f"{tag}: {len(files)} damaged files, the same answer from both readers")

        # oversub report: a line per kernel with its unreadable launches.
        rp = sample()
        rp.launches.append(Launch(3, 0, 45, [], LAUNCH_UNREADABLE))
        path = tmp / "report.oprof"
        path.write_bytes(encode(rp))
        r = subprocess.run([sys.executable, str(args.oversub), "report", str(path)],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"report exit {r.returncode}: {r.stderr}")
        check("launches with an unreadable parameter layout: 2 of 4" in r.stdout, r.stdout)
        check("unreadable: relu(float*): 2 launches in the iteration, taken to touch any page "
              "in swap mode" in r.stdout, r.stdout)
        check("gemm(float*): " not in r.stdout.split("unreadable", 1)[-1], r.stdout)
        plain = tmp / "plain.oprof"
        plain.write_bytes(v1)
        r = subprocess.run([sys.executable, str(args.oversub), "report", str(plain)],
                           capture_output=True, text=True)
        check(r.returncode == 0 and "unreadable" not in r.stdout,
              f"report of a profile with no marked launch: {r.stdout}{r.stderr}")
        check("link measured: h2d 50.0 GB/s" in r.stdout and "recorded off" not in r.stdout,
              r.stdout)

        # A recording (source recorded) says what it knows: modeled durations, no link
        # measured. Max idle wraps around the iteration for a long-lived buffer only.
        rec = Profile("recorded", False, 2, 20, 10, "", "oversub trace-torch x",
                      80 << 30, 50_000_000_000, 50_000_000_000, 0)
        rec.strings = ["k"]
        rec.allocations = [Allocation(0, 8 << 20, 0x7F0000000000, 2, 5, False, None),
                           Allocation(None, 4 << 20, 0x7F0000800000, 0, None, True, None)]
        rec.launches = [Launch(0, 1000, i, [b for b, uses in ((0, (2, 4)), (1, (1, 8)))
                                            if i in uses]) for i in range(10)]
        path = tmp / "recorded.oprof"
        path.write_bytes(encode(rec))
        r = subprocess.run([sys.executable, str(args.oversub), "report", str(path)],
                           capture_output=True, text=True)
        out = r.stdout
        check(r.returncode == 0 and "recorded off the GPU" in out and "no GPU ran it" in out
              and "(modeled:" in out and "none measured" in out and "link measured" not in out
              and "oversub_iteration_begin" not in out and "seen through" not in out,
              f"report of a recording: {out}{r.stderr}")
        rows = {line.split()[2]: line.split() for line in out.splitlines()
                if line.strip().startswith(("8.00 MiB", "4.00 MiB"))}
        check(rows.get("#0", [])[-2:-1] == ["2"], f"per-iteration buffer's max idle: {rows}")
        check(rows.get("long-lived", [])[-2:-1] == ["7"], f"long-lived max idle: {rows}")
    if FAILURES:
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
