"""What every step of gpu-validate shares: running commands, logging, step results.

A `kit` holds the output folder and the two logs every command goes to: `log.txt`
(one line per command with its exit status and seconds, plus each step's verdict)
and `raw.txt` (each command's full stdout and stderr). A step returns a
`step_result`: a status (`pass`, `fail` or `skipped`), the reason when not `pass`,
table rows for the summary and free-form data for results.json. Nothing here
decides a verdict; the steps do.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


@dataclass
class step_result:
    number: int
    name: str
    status: str = "pass"          # pass | fail | skipped
    reason: str = ""              # why not pass
    seconds: float = 0.0
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def fail(self, why: str) -> None:
        self.status = "fail"
        self.reason = f"{self.reason}; {why}" if self.reason else why

    def skip(self, why: str) -> None:
        if self.status != "fail":
            self.status = "skipped"
            self.reason = why

    def verdict(self) -> str:
        if self.status == "pass":
            return "pass"
        return f"{'FAIL' if self.status == 'fail' else 'skipped'}: {self.reason}"


@dataclass
class run_output:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


class kit:
    """The output folder, the logs, and the environment commands start from."""

    def __init__(self, outdir: Path, sim: bool, quick: bool, lib: Path) -> None:
        self.outdir = outdir
        self.sim = sim
        self.quick = quick
        self.lib = lib
        self.commands: list[str] = []
        self.deadline: float | None = None     # time.monotonic() past which no run starts
        self.ballast = False                   # step 4: --ballast (see torch_step.py)
        self.crashes = 0                       # kept in crash.txt (keep_crash)
        self._lock = threading.Lock()
        outdir.mkdir(parents=True, exist_ok=True)
        self._log = (outdir / "log.txt").open("w")
        self._raw = (outdir / "raw.txt").open("w")
        self.base_env: dict[str, str] = {
            k: v for k, v in os.environ.items()
            if not k.startswith("OVERSUB_") and k not in ("LD_PRELOAD",)}

    def log(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)
            self._log.write(line + "\n")
            self._log.flush()

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def env(self, extra: dict[str, str] | None = None, preload: bool = False) -> dict[str, str]:
        env = dict(self.base_env)
        if preload:
            env["LD_PRELOAD"] = str(self.lib)
        env.update(extra or {})
        return env

    def run(self, cmd: list[str], extra: dict[str, str] | None = None, preload: bool = False,
            timeout_s: float = 600, label: str = "", cwd: Path | None = None) -> run_output:
        """Runs one command; logs it as a shell line (paths relative to the repository)."""
        env = self.env(extra, preload)
        shown = {**({"LD_PRELOAD": str(self.lib)} if preload else {}), **(extra or {})}
        line = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
        line = (line + " " if line else "") + shlex.join(cmd)
        line = line.replace(shlex.quote(sys.executable), "python3").replace(f"{REPO}/", "")
        with self._lock:
            self.commands.append(line)
        start = time.monotonic()
        timed_out = False
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=timeout_s, check=False, cwd=cwd,
                                  errors="replace")
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as expired:
            timed_out = True
            rc = -9
            out = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else (expired.stdout or "")
            err = (expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else (expired.stderr or "")) + f"\n(timed out after {timeout_s} s)"
        except OSError as error:
            rc, out, err = 127, "", f"cannot run: {error}"
        seconds = time.monotonic() - start
        if preload and (timed_out or rc < 0 or rc >= 128):
            self.keep_crash(cmd, extra or {}, line, rc, timed_out, timeout_s, cwd)
        status = "timed out" if timed_out else f"exit {rc}"
        self.log(f"  $ {line}  -> {status}, {seconds:.2f} s{'  [' + label + ']' if label else ''}")
        with self._lock:
            self._raw.write(f"===== $ {line}\n===== {status}, {seconds:.2f} s\n"
                            f"----- stdout\n{out}----- stderr\n{err}\n")
            self._raw.flush()
        return run_output(cmd, rc, out, err, seconds, timed_out)

    def keep_crash(self, cmd: list[str], extra: dict[str, str], line: str, rc: int,
                   timed_out: bool, timeout_s: float, cwd: Path | None) -> None:
        """A run under the library that crashed (a signal) or timed out: the command
        again with OVERSUB_LOG=debug, and crash.txt gets the one-line reproducer, the
        last 200 lines of that log and the exit statistics (one file for every crash of
        the run, at most 8 crashes kept)."""
        if self.crashes >= 8:
            return
        self.crashes += 1
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "debug.log"
            stats = Path(tmp) / "stats.json"
            env = self.env({**extra, "OVERSUB_LOG": "debug", "OVERSUB_LOG_FILE": str(log),
                            "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats)}, True)
            again = "not run (time budget spent)"
            try:
                if self.out_of_time():
                    raise OSError("time budget spent")
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                      timeout=min(timeout_s, 60), check=False, cwd=cwd,
                                      errors="replace")
                again = f"exit {proc.returncode}"
            except subprocess.TimeoutExpired:
                again = "timed out"
            except OSError as error:
                again = f"not run: {error}"
            tail = log.read_text(errors="replace").splitlines()[-200:] if log.exists() else []
            stats_text = stats.read_text(errors="replace").strip() if stats.exists() else "(none written)"
        with (self.outdir / "crash.txt").open("a") as out:
            out.write(f"===== {'timed out' if timed_out else f'exit {rc}'}: reproduce with\n"
                      f"{line}\n"
                      f"----- again with OVERSUB_LOG=debug: {again}; its last {len(tail)} log lines\n"
                      + "\n".join(tail) + f"\n----- its exit statistics\n{stats_text}\n\n")
        self.log(f"  crash kept in {self.outdir / 'crash.txt'} (reproducer, debug log tail, statistics)")

    def close(self) -> None:
        self._log.close()
        self._raw.close()


def first_line(text: str, limit: int = 160) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def last_line(text: str, limit: int = 200) -> str:
    """The last non-empty line: what a Python traceback or a CUDA error ends with."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1][:limit] if lines else ""


def mode_built(k: kit, mode: str) -> tuple[bool, str]:
    """Whether liboversub accepts OVERSUB_MODE=mode (it exits 2 on an unknown mode)."""
    proc = k.run(["/bin/true"], {"OVERSUB_MODE": mode}, preload=True, timeout_s=30,
                 label=f"is OVERSUB_MODE={mode} built?")
    if proc.returncode == 0:
        return True, ""
    if proc.returncode == 2 and "OVERSUB_MODE" in proc.stderr:
        return False, f"OVERSUB_MODE={mode} not built yet"
    return False, f"liboversub under OVERSUB_MODE={mode} ended /bin/true with {proc.returncode}: {first_line(proc.stderr)}"


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
