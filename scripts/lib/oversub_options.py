"""`oversub options [--markdown]`: the options reference, printed by oversub-options
(tools/options_doc.cc) from the OVERSUB_OPTIONS table in common/options.h, so the
text cannot drift from the parser. scripts/update-options-doc puts the Markdown form
into README.md and the user guides."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = "oversub-options"


def find_program(repo: Path, explicit: Path | None) -> Path | None:
    """--program, else $OVERSUB_OPTIONS_PROGRAM, else the newest build*/tools/oversub-options."""
    if explicit is None and os.environ.get("OVERSUB_OPTIONS_PROGRAM"):
        explicit = Path(os.environ["OVERSUB_OPTIONS_PROGRAM"])
    if explicit is not None:
        return explicit.resolve() if explicit.is_file() else None
    found = [p for p in repo.glob(f"build*/tools/{PROGRAM}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime).resolve() if found else None


def reference(repo: Path, program: Path | None, markdown: bool) -> str:
    """The reference text; raises LookupError when the program is not built."""
    tool = find_program(repo, program)
    if tool is None:
        where = program if program is not None else f"{repo}/build*/tools/"
        raise LookupError(f"{PROGRAM} not found in {where}; build it first "
                          f"(meson setup build && ninja -C build) or pass --program")
    argv = [str(tool)] + (["--markdown"] if markdown else [])
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def add_parser(sub: argparse._SubParsersAction, repo: Path) -> None:
    p = sub.add_parser("options", help="print every OVERSUB_* option: accepted values, "
                       "default, what it does",
                       description="Print the options reference, generated from the "
                                   "options table the library parses.")
    p.add_argument("--markdown", action="store_true",
                   help="a Markdown table (the block README.md and the guides hold)")
    p.add_argument("--program", type=Path, metavar="PATH",
                   help=f"the {PROGRAM} program (default: newest build*/tools/)")

    def run(args: argparse.Namespace) -> int:
        try:
            sys.stdout.write(reference(repo, args.program, args.markdown))
        except LookupError as e:
            print(f"oversub options: {e}", file=sys.stderr)
            return 2
        return 0

    p.set_defaults(func=run)
