#!/usr/bin/env python3
"""ABI checks of liboversub.so, run by meson test (suite 'abi').

exports  the dynamic symbols liboversub.so defines are exactly the hook tables':
         the runtime's (exports.sym, from interpose/hooks.def) under the version
         node libcudart.so.13, the driver's (exports_driver.sym, from
         interpose/driver_hooks.def) under libcuda.so.1, dlsym under glibc's own
         two versions, oversub's own entry points; nothing else leaks (no fmt, no C++).
needed   no NEEDED entry names libcudart, libcuda or libcupti, and none but glibc;
         no symbol needs a glibc newer than 2.31 (interpose/glibc_compat.cc).
runtime  every symbol of the runtime hook table is exported by the real CUDA
         runtime, and every driver hook by the driver (the toolkit's stub
         libcuda.so, which exports the real driver's symbols): catches a misspelt
         hook or a _ptsz twin CUDA does not have.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

VERSION_NODE = "libcudart.so.13"
DRIVER_NODE = "libcuda.so.1"
# dlsym, under the versions CUDA's libraries (GLIBC_2.2.5 on x86-64, GLIBC_2.17 on
# aarch64) and newer binaries (GLIBC_2.34) bind to.
DLSYM_VERSIONS = ({"GLIBC_2.2.5", "GLIBC_2.34"}, {"GLIBC_2.17", "GLIBC_2.34"})
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


def dynamic_symbols(readelf: str, lib: Path, defined: bool = True) -> list[tuple[str, str]]:
    """(name, version) of every defined (or, defined=False, undefined) dynamic symbol;
    version '' when unversioned."""
    out = subprocess.run([readelf, "--dyn-syms", "-W", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    symbols: list[tuple[str, str]] = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        kind, bind, ndx, name = fields[3], fields[4], fields[6], fields[7]
        if bind == "LOCAL" or kind in ("SECTION", "FILE") or ndx == "ABS":
            continue
        if (ndx == "UND") == defined:
            continue
        base, _, version = name.partition("@")
        symbols.append((base, version.lstrip("@")))
    return symbols


def defined_dynamic_symbols(readelf: str, lib: Path) -> dict[str, str]:
    """name -> version for every defined dynamic symbol (the last one of a name)."""
    return dict(dynamic_symbols(readelf, lib))


def check_exports(args: argparse.Namespace) -> list[str]:
    want = expected_symbols(args.expected)
    want_driver = expected_symbols(args.expected_driver) if args.expected_driver else set()
    pairs = dynamic_symbols(args.readelf, args.lib)
    dlsym_versions = {v for n, v in pairs if n == "dlsym"}
    have = {n: v for n, v in pairs if n != "dlsym"}
    problems = [f"{s} has version '{have.get(s)}', want {v}"
                for s, v in OWN_EXPORTS.items() if have.pop(s, None) != v]
    if dlsym_versions not in DLSYM_VERSIONS:
        problems.append(f"dlsym exported under {sorted(dlsym_versions) or 'no version'}, want "
                        f"one of {[sorted(v) for v in DLSYM_VERSIONS]}")
    all_want = want | want_driver
    problems += [f"hook not exported: {s}" for s in sorted(all_want - have.keys())]
    problems += [f"exported but in no hook table: {s}" for s in sorted(have.keys() - all_want)]
    problems += [f"{s} has version '{have[s]}', want {VERSION_NODE}"
                 for s in sorted(want & have.keys()) if have[s] != VERSION_NODE]
    problems += [f"{s} has version '{have[s]}', want {DRIVER_NODE}"
                 for s in sorted(want_driver & have.keys()) if have[s] != DRIVER_NODE]
    if not problems:
        print(f"{len(want)} runtime hooks exported under {VERSION_NODE}, {len(want_driver)} "
              f"driver hooks under {DRIVER_NODE}, dlsym under {', '.join(sorted(dlsym_versions))}, "
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
    # Only what the library needs: undefined symbols and the version-needs section
    # (the dlsym it defines under GLIBC_2.34 is its own, not a requirement).
    refs = subprocess.run([args.readelf, "-V", "-W", str(args.lib)], check=True,
                          capture_output=True, text=True).stdout
    needs = refs[refs.find("Version needs section"):] if "Version needs section" in refs else ""
    users: dict[tuple[int, ...], set[str]] = {}
    for name, version in dynamic_symbols(args.readelf, args.lib, defined=False):
        if version.startswith("GLIBC_"):
            users.setdefault(tuple(int(x) for x in version[6:].split(".")), set()).add(name)
    for version in re.findall(r"Name: GLIBC_([0-9.]+)", needs):
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
        print(f"all {len(want)} runtime hooks exist in {args.runtime}")
    if args.driver is not None and args.expected_driver is not None:
        if not args.driver.exists():
            print(f"SKIP: {args.driver} not found")
            return problems
        want_driver = expected_symbols(args.expected_driver)
        have_driver = defined_dynamic_symbols(args.readelf, args.driver)
        missing = [f"{s} is not exported by {args.driver}"
                   for s in sorted(want_driver - have_driver.keys())]
        if not missing:
            print(f"all {len(want_driver)} driver hooks exist in {args.driver}")
        problems += missing
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["exports", "needed", "runtime"])
    parser.add_argument("--lib", type=Path, required=True, help="liboversub.so")
    parser.add_argument("--expected", type=Path, help="exports.sym from the build")
    parser.add_argument("--expected-driver", type=Path, help="exports_driver.sym from the build")
    parser.add_argument("--runtime", type=Path, help="the real libcudart.so.13")
    parser.add_argument("--driver", type=Path, help="the toolkit's stub libcuda.so")
    parser.add_argument("--readelf", default="readelf")
    args = parser.parse_args()
    checks = {"exports": check_exports, "needed": check_needed, "runtime": check_runtime}
    problems = checks[args.check](args)
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
