"""results.json and summary.md of a gpu-validate run.

summary.md is written to be appended to docs/gpu-results.md as it stands: a level-2
heading with the date and the GPU, what ran it (exact command, library, commit),
then one level-3 section per step with its verdict, time, table, notes and the
exact commands it ran (folded).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .common import step_result


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(columns: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    out = ["| " + " | ".join(cell(c) for c in columns) + " |",
           "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def write(outdir: Path, header: dict[str, Any], steps: list[step_result],
          commands: dict[int, list[str]]) -> None:
    results = {**header, "steps": [{**asdict(s), "commands": commands.get(s.number, [])} for s in steps]}
    (outdir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    counts = {status: sum(1 for s in steps if s.status == status) for status in ("pass", "fail", "skipped")}
    where = "simgpu (virtual time; not a GPU)" if header["sim"] else header["gpu"]
    lines = [f"## {header['date']}: {where}", ""]
    if header["sim"]:
        lines += ["Run with `--sim`: every figure below comes from simgpu, the CPU stand-in "
                  "(docs/simgpu.md). Event times and bandwidths are its virtual clock, built from "
                  "the device model's data sheet figures; wall times are CPU times. Nothing here "
                  "was measured on a GPU.", ""]
    lines += [f"- command: `{header['command']}`",
              f"- GPU: {header['gpu']}; driver {header['driver']}, runtime {header['runtime']}",
              f"- toolkit: {header['toolkit']}",
              f"- liboversub: `{header['lib']}` (commit {header['commit']})",
              f"- steps: {counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped"
              f" ({header['seconds']:.1f} s)", ""]
    for s in steps:
        lines += [f"### Step {s.number}: {s.name}: {s.verdict()} ({s.seconds:.1f} s)", ""]
        lines += table(s.columns, s.rows)
        lines += [f"- {n}" for n in s.notes]
        if s.notes:
            lines.append("")
        cmds = commands.get(s.number, [])
        if cmds:
            lines += ["<details><summary>commands</summary>", "", "```"] + cmds + ["```", "", "</details>", ""]
    (outdir / "summary.md").write_text("\n".join(lines))
