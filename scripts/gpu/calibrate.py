"""A simgpu device model from the facts a GPU gave (gpu_facts's JSON, step 1).

`calibrate(facts, base_model_text)` returns the text of a model in simgpu's format
(tests/simgpu/devices/*.model, read by tests/simgpu/driver/device_model.cc): the
measured figures replace the base model's, each with its provenance in a comment,
and the keys no fact measures (compute rate, memory bandwidth, clocks, caches,
pageable copies) keep the base model's values, said so. A facts file that lacks a
field the model needs is refused with the field's name, and nothing is written.

VMM costs: simgpu charges a call `<family>_ns + <family>_per_2mib_ns * pages`. One
2 MiB page costs a + b and a run of N pages in one call a + N * b, so the two points
gpu_facts measures (one page; 64 MiB, or 16 pages in one call) give a and b. Where
the facts have them, the figures measured while a kernel runs are taken: training
keeps the GPU busy, and the calls cost more then. Where the facts also time 16
one-page calls of a family in a row (vmm_calls.run16_separate), the per-call part of
such a repeated call is `<family>_repeat_ns`: (the 16 calls' time - one call's) / 15,
less the per-page part (Note [Repeated VMM calls] in tests/simgpu/driver/device_model.cc).

  python3 scripts/gpu/calibrate.py facts.json tests/simgpu/devices/h100-pcie.model > out.model
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

VMM = (("create", "vmm_create"), ("map", "vmm_map"), ("set_access", "vmm_set_access"),
       ("unmap", "vmm_unmap"), ("release", "vmm_release"))
PAGE = 2 << 20


class missing_field(ValueError):
    """A facts file without a field the model needs (its dotted path)."""


def field(facts: dict, path: str):
    node = facts
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node or node[part] in (None, "error"):
            raise missing_field(path)
        node = node[part]
    return node


def vmm_points(facts: dict) -> tuple[dict[str, float], dict[str, float], int, str]:
    """(one page's us per call family, the larger point's, its pages, where from)."""
    calls = facts.get("vmm_calls")
    if isinstance(calls, dict) and "page" in calls and "run16_one_call" in calls:
        # While a kernel runs, as it does all through training: the calls return before
        # it ends, but cost several times their idle figure (an H200: set access 124 us
        # busy against 27 idle).
        page = {n: float(field(facts, f"vmm_calls.page.busy.{n}_us.p50")) for n, _ in VMM}
        run = {n: float(field(facts, f"vmm_calls.run16_one_call.busy.{n}_us.p50")) for n, _ in VMM}
        return page, run, 16, ("vmm_calls (p50, a kernel running on another stream): one page, "
                               "and 16 pages in one call")
    pages = int(field(facts, "vmm_latency.large.bytes")) // PAGE
    page = {n: float(field(facts, f"vmm_latency.granule.{n}_us")) for n, _ in VMM}
    run = {n: float(field(facts, f"vmm_latency.large.{n}_us")) for n, _ in VMM}
    return page, run, pages, f"vmm_latency (median): one 2 MiB page, and {pages} pages in one call"


def calibrate(facts: dict, base: str, source: str = "facts.json") -> str:
    name = str(field(facts, "device.name"))
    values: dict[str, tuple[str, str]] = {}   # key -> (value, provenance)
    values["name"] = (name, "device.name")
    values["memory"] = (str(int(field(facts, "device.total_bytes"))), "device.total_bytes")
    values["sm_count"] = (str(int(field(facts, "device.sm_count"))), "device.sm_count")
    values["compute_capability"] = (str(field(facts, "device.compute_capability")),
                                    "device.compute_capability")
    h2d = float(field(facts, "pinned_bandwidth.h2d_gbps"))
    d2h = float(field(facts, "pinned_bandwidth.d2h_gbps"))
    values["h2d_pinned_bandwidth"] = (f"{h2d * 1e9:.4g}", "pinned_bandwidth.h2d_gbps (events)")
    values["d2h_pinned_bandwidth"] = (f"{d2h * 1e9:.4g}", "pinned_bandwidth.d2h_gbps (events)")
    page, run, pages, where = vmm_points(facts)
    for fam, key in VMM:
        per_page = max(0.0, (run[fam] - page[fam]) / (pages - 1)) if pages > 1 else 0.0
        per_call = max(0.0, page[fam] - per_page)
        values[f"{key}_ns"] = (str(round(per_call * 1000)), f"{where}: {fam}")
        values[f"{key}_per_2mib_ns"] = (str(round(per_page * 1000)), f"{where}: {fam}")
        calls = facts.get("vmm_calls")
        if isinstance(calls, dict) and "run16_separate" in calls and "page" in calls:
            sixteen = float(field(facts, f"vmm_calls.run16_separate.busy.{fam}_us.p50"))
            repeat = max(0.0, (sixteen - page[fam]) / 15 - per_page)
            values[f"{key}_repeat_ns"] = (
                str(round(repeat * 1000)),
                f"vmm_calls (p50, a kernel running on another stream): 16 one-page calls "
                f"in a row less one alone, over 15, less the per-page part: {fam}")
    events = facts.get("events")
    if isinstance(events, dict):
        for key, fact in (("event_record_ns", "record_us"), ("event_query_ns", "query_completed_us"),
                          ("event_sync_ns", "synchronize_completed_us"),
                          ("stream_wait_event_ns", "stream_wait_us")):
            try:
                values[key] = (str(round(float(field(facts, f"events.{fact}.p50")) * 1000)),
                               f"events.{fact}.p50")
            except missing_field:
                pass
    # launch_rate is not taken for launch_enqueue_ns: 20000 empty kernels in a row are
    # paced by the device (an H200: 4.6 us a launch on the host and on the device
    # alike), not by the host's enqueue cost the key stands for.
    # Managed memory's own rates (Note [Managed migration rates] in
    # tests/simgpu/driver/device_model.cc): absent where the device has no concurrent
    # managed access (gpu_facts skips them), and then the base model's stay.
    prefetch = facts.get("managed_prefetch")
    if isinstance(prefetch, dict) and "to_device_gbps" in prefetch:
        up = float(field(facts, "managed_prefetch.to_device_gbps"))
        down = float(field(facts, "managed_prefetch.to_host_gbps"))
        values["managed_h2d_bandwidth"] = (f"{up * 1e9:.4g}", "managed_prefetch.to_device_gbps (events)")
        values["managed_d2h_bandwidth"] = (f"{down * 1e9:.4g}", "managed_prefetch.to_host_gbps (events)")
        faults = facts.get("managed_faults")
        if isinstance(faults, dict) and "migrated_gbps" in faults:
            # simgpu charges a faulted page managed_fault_ns plus its migration at the
            # managed rate to the device, one after another within a kernel; the
            # toucher faults one page per stride.
            stride = float(field(facts, "managed_faults.touch_stride_bytes"))
            rate = float(field(facts, "managed_faults.migrated_gbps")) * 1e9
            fault_ns = max(0.0, stride / rate * 1e9 - stride / (up * 1e9) * 1e9)
            values["managed_fault_ns"] = (str(round(fault_ns)),
                                          "managed_faults.migrated_gbps (events), less a page's "
                                          "migration at managed_h2d_bandwidth")
    # The device memory a small managed allocation takes once prefetched: simgpu gives
    # each managed allocation whole pages of managed_page_size, which both that figure
    # and the 96 KiB allocations' (two pages of 64 KiB, one of 2 MiB) must agree with.
    footprint = facts.get("managed_footprint")
    if isinstance(footprint, dict) and "small" in footprint:
        page = int(field(facts, "managed_footprint.small.device_bytes_each"))
        medium = int(field(facts, "managed_footprint.medium.bytes"))
        medium_each = int(field(facts, "managed_footprint.medium.device_bytes_each"))
        if 4096 <= page <= (2 << 20) and page & (page - 1) == 0 and \
                medium_each == -(-medium // page) * page:
            values["managed_page_size"] = (f"{page // 1024}KiB",
                                           "managed_footprint.small.device_bytes_each")
    # What a discard costs per managed page it gives back (Note [Discards] in
    # tests/simgpu/driver/managed.h): the whole range's time over its pages, at the
    # page size measured above or the base model's.
    discard = facts.get("managed_discard")
    if isinstance(discard, dict) and "discard_us" in discard:
        in_base = re.search(r"^managed_page_size\s*=\s*(\d+)KiB", base, re.M)
        page_key = values.get("managed_page_size",
                              (f"{in_base.group(1) if in_base else 64}KiB",))[0]
        page = int(page_key[:-3]) * 1024
        pages = max(1, int(field(facts, "managed_discard.bytes")) // page)
        per_page = float(field(facts, "managed_discard.discard_us")) * 1e3 / pages
        values["managed_discard_page_ns"] = (str(round(per_page)),
                                             "managed_discard.discard_us over its managed pages")
    # Whether one cuMemUnmap may span several whole mappings (Note [One unmap over
    # several mappings] in tests/simgpu/driver/vmm.cc): 16 one-page handles mapped one
    # by one, then one access grant and one unmap over their span, on an idle GPU.
    calls = facts.get("vmm_calls")
    ranged = calls.get("run16_handles_ranged") if isinstance(calls, dict) else None
    idle = ranged.get("idle") if isinstance(ranged, dict) else None
    if isinstance(idle, dict):
        refused = "cuMemUnmap" in str(idle.get("error", ""))
        if refused or "error" not in idle:
            values["vmm_unmap_spans_mappings"] = ("0" if refused else "1",
                                                  "vmm_calls.run16_handles_ranged.idle")
    # Whether two threads' VMM calls run side by side or one after the other (Note [VMM
    # calls one at a time] in tests/simgpu/driver/vmm.cc): 32 remaps of a page on one
    # thread against 16 on each of two at once, a kernel running on another stream. A
    # speedup under 1.5 is one at a time. (On simgpu, as every VMM figure, it is timed
    # on the CPU's clock, not the model's.)
    two = calls.get("two_threads") if isinstance(calls, dict) else None
    busy = two.get("busy") if isinstance(two, dict) else None
    if isinstance(busy, dict) and "speedup" in busy:
        values["vmm_calls_serialized"] = (
            "1" if float(busy["speedup"]) < 1.5 else "0",
            f"vmm_calls.two_threads.busy.speedup {float(busy['speedup']):.2f}")
    # Whether a ready copy runs while one issued before it waits on its stream (Note
    # [Copy engines serve ready copies] in tests/simgpu/driver/clock.h).
    beside = facts.get("copy_beside_blocked")
    if isinstance(beside, dict) and "ready_copy_ran_first" in beside:
        values["copy_engines_serve_ready"] = ("1" if beside["ready_copy_ran_first"] else "0",
                                              "copy_beside_blocked.ready_copy_ran_first")
    host = facts.get("host_vmm")
    if isinstance(host, dict) and "supported" in host:
        values["host_vmm_supported"] = ("1" if host["supported"] else "0", "host_vmm.supported")

    out = [f"# {name}: measured by scripts/gpu-validate (tests/gpu/gpu_facts.cc), written by",
           f"# scripts/gpu/calibrate.py from {source}. Keys marked 'measured' come from",
           "# the GPU; the others keep the base model's values (its comments follow them).",
           f"# Driver {facts.get('nvidia_smi', facts.get('driver_version', '?'))}, runtime "
           f"{facts.get('runtime_version', '?')}."]
    seen = set()
    for line in base.splitlines():
        m = re.match(r"^([a-z_0-9]+)\s*=\s*(.*?)\s*(#.*)?$", line)
        if m is None:
            if line.startswith("#") and line.lstrip("# ").startswith(("NVIDIA", "Sources")):
                out.append("# base model: " + line.lstrip("# "))
            else:
                out.append(line)
            continue
        key = m.group(1)
        if key in values:
            value, why = values[key]
            out.append(f"{key} = {value}   # measured: {why}")
            seen.add(key)
            repeat = key.replace("_per_2mib_ns", "_repeat_ns")
            if key.endswith("_per_2mib_ns") and repeat in values and repeat not in seen:
                out.append(f"{repeat} = {values[repeat][0]}   # measured: {values[repeat][1]}")
                seen.add(repeat)
        else:
            out.append(line)
    for key, (value, why) in values.items():
        if key not in seen:
            out.append(f"{key} = {value}   # measured: {why}")
    return "\n".join(out) + "\n"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    facts_path, base_path = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        facts = json.loads(facts_path.read_text())
        text = calibrate(facts, base_path.read_text(), facts_path.name)
    except missing_field as e:
        print(f"calibrate: {facts_path} has no field '{e.args[0]}': no model written", file=sys.stderr)
        return 1
    except (OSError, json.JSONDecodeError) as e:
        print(f"calibrate: {e}: no model written", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
