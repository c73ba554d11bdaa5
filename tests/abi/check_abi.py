#!/usr/bin/env python3
"""ABI checks of liboversub.so, run by meson test (suite 'abi').

exports  the dynamic symbols liboversub.so defines are exactly the hook table's
         (exports.sym, preprocessed from interpose/hooks.def), each under the
         version node libcudart.so.13, and nothing else leaks (no fmt, no C++).
needed   no NEEDED entry names libcudart, libcuda or libcupti, and none but glibc;
         no symbol needs a glibc newer than 2.31 (interpose/glibc_compat.cc).
runtime  every symbol of the hook table is exported by the real CUDA runtime
         (catches a misspelt hook or a _ptsz twin CUDA does not have).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

VERSION_NODE = "libcudart.so.13"
# oversub's own entry points (not CUDA's), under a node of their own.
OWN_EXPORTS = {"oversub_iteration_begin": "OVERSUB_0"}
FORBIDDEN_NEEDED = re.compile(r"^lib(cudart|cuda|cupti)\.so")
# Only glibc: the library must load on a GPU machine that has none of the build's
# packages (fmt is header-only, libstdc++ and libgcc are linked statically).
ALLOWED_NEEDED = re.compile(r"^(libc|libm|libdl|libpthread|librt)\.so\.\d+$|^ld-linux[-\w.]*\.so\.\d+$")
# The oldest glibc the library must load on (Ubuntu 20.04, Debian 11).
MAX_GLIBC = (2, 31)


def expected_symbols(path: Path) -> set[str]:
    return set(path.read_text().split())


def defined_dynamic_symbols(readelf: str, lib: Path) -> dict[str, str]:
    """name -> version ('' when unversioned) for every defined dynamic symbol."""
    out = subprocess.run([readelf, "--dyn-syms", "-W", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    symbols: dict[str, str] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        kind, bind, ndx, name = fields[3], fields[4], fields[6], fields[7]
        if ndx in ("UND", "ABS") or bind == "LOCAL" or kind in ("SECTION", "FILE"):
            continue
        base, _, version = name.partition("@")
        symbols[base] = version.lstrip("@")
    return symbols


def check_exports(args: argparse.Namespace) -> list[str]:
    want = expected_symbols(args.expected)
    have = defined_dynamic_symbols(args.readelf, args.lib)
    problems = [f"{s} has version '{have.get(s)}', want {v}"
                for s, v in OWN_EXPORTS.items() if have.pop(s, None) != v]
    problems += [f"hook not exported: {s}" for s in sorted(want - have.keys())]
    problems += [f"exported but not in hooks.def: {s}" for s in sorted(have.keys() - want)]
    problems += [f"{s} has version '{have[s]}', want {VERSION_NODE}"
                 for s in sorted(want & have.keys()) if have[s] != VERSION_NODE]
    if not problems:
        print(f"{len(want)} hooks exported under {VERSION_NODE}, "
              f"{', '.join(OWN_EXPORTS)} under its own node, nothing else")
    return problems


def check_needed(args: argparse.Namespace) -> list[str]:
    out = subprocess.run([args.readelf, "-d", "-W", str(args.lib)], check=True,
                         capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    print("NEEDED:", " ".join(needed))
    if not needed:
        return ["no NEEDED entries found at all: readelf output not understood"]
    problems = [f"liboversub.so must not need {n}" for n in needed if FORBIDDEN_NEEDED.match(n)]
    problems += [f"liboversub.so needs {n}, which a GPU machine may lack (only glibc allowed)"
                 for n in needed if not FORBIDDEN_NEEDED.match(n) and not ALLOWED_NEEDED.match(n)]
    return problems + check_glibc_versions(args)


def check_glibc_versions(args: argparse.Namespace) -> list[str]:
    """Every GLIBC_x.y the library needs (symbols and version references) <= MAX_GLIBC."""
    syms = subprocess.run([args.readelf, "--dyn-syms", "-W", str(args.lib)], check=True,
                          capture_output=True, text=True).stdout
    refs = subprocess.run([args.readelf, "-V", "-W", str(args.lib)], check=True,
                          capture_output=True, text=True).stdout
    users: dict[tuple[int, ...], set[str]] = {}
    for name, version in re.findall(r"\s(\S+?)@@?GLIBC_([0-9.]+)", syms):
        users.setdefault(tuple(int(x) for x in version.split(".")), set()).add(name)
    for version in re.findall(r"Name: GLIBC_([0-9.]+)", refs):
        users.setdefault(tuple(int(x) for x in version.split(".")), set())
    if not users:
        return ["no GLIBC_ versions found at all: readelf output not understood"]
    newest = max(users)
    bound = ".".join(map(str, MAX_GLIBC))
    print(f"newest glibc version needed: {'.'.join(map(str, newest))} (at most {bound} allowed)")
    return [f"needs GLIBC_{'.'.join(map(str, v))} (> {bound}) for "
            f"{', '.join(sorted(users[v])) or 'a version reference'}: see interpose/glibc_compat.cc"
            for v in sorted(users) if v > MAX_GLIBC]


def check_runtime(args: argparse.Namespace) -> list[str]:
    if not args.runtime.exists():
        print(f"SKIP: {args.runtime} not found")
        return []
    want = expected_symbols(args.expected)
    have = defined_dynamic_symbols(args.readelf, args.runtime)
    problems = [f"{s} is not exported by {args.runtime}" for s in sorted(want - have.keys())]
    if not problems:
        print(f"all {len(want)} hooks exist in {args.runtime}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["exports", "needed", "runtime"])
    parser.add_argument("--lib", type=Path, required=True, help="liboversub.so")
    parser.add_argument("--expected", type=Path, help="exports.sym from the build")
    parser.add_argument("--runtime", type=Path, help="the real libcudart.so.13")
    parser.add_argument("--readelf", default="readelf")
    args = parser.parse_args()
    checks = {"exports": check_exports, "needed": check_needed, "runtime": check_runtime}
    problems = checks[args.check](args)
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
