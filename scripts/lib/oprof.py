"""Reader and writer of oversub profile files (docs/profile-format.md), for scripts.

    from oprof import read_profile, write_profile, ProfileError
    p = read_profile("model.oprof")   # raises ProfileError with a clear message
    for launch in p.launches: print(p.strings[launch.name], launch.buffers)
    write_profile("copy.oprof", p)    # encode(p) gives the bytes

A file whose name ends in .gz is read and written through gzip (the C++ reader
takes plain files only: decompress first for it).

Standard library only. Validates what the C++ reader (profiler/profile_format.cc)
validates: magic, version, header, length, CRC-32, every count, index and flag.
Reads versions 1 and 2 (a version 1 launch has flags 0); writes version 2.
"""
from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"OVSPROF\0"
VERSION = 2          # written
OLDEST_VERSION = 1   # the oldest read
HEADER_BYTES = 32
NO_INDEX = 0xFFFFFFFF
SOURCES = ("automatic", "marker", "api", "recorded")
COPY_KINDS = ("other", "h2d", "d2h", "d2d", "memset")
# Launch.flags bits (Note [A launch whose buffers are not known] in
# profiler/profile_format.h): the parameter layout could not be read, so the buffer
# set is unknown and the launch is taken to use every buffer live at it.
LAUNCH_UNREADABLE = 1
LAUNCH_KNOWN_FLAGS = LAUNCH_UNREADABLE


class ProfileError(Exception):
    """The file is not a profile this reader accepts; str() says why."""


@dataclass
class Frame:
    module: int
    offset: int
    symbol: int


@dataclass
class Allocation:
    ordinal: int | None
    bytes: int
    address: int
    alloc_at: int
    free_at: int | None
    long_lived: bool
    call_site: int | None


@dataclass
class Launch:
    name: int
    duration_ns: int
    correlation_id: int
    buffers: list[int]
    flags: int = 0

    @property
    def unreadable(self) -> bool:
        return bool(self.flags & LAUNCH_UNREADABLE)


@dataclass
class Copy:
    before_launch: int
    kind: str
    bytes: int
    duration_ns: int
    buffer: int | None


@dataclass
class Profile:
    source: str
    cupti: bool
    iterations_seen: int
    total_launches: int
    first_launch: int
    marker: str
    program: str
    capacity_bytes: int
    h2d_bytes_per_s: int
    d2h_bytes_per_s: int
    iteration_kernel_ns: int
    strings: list[str] = field(default_factory=list)
    call_sites: list[list[Frame]] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)

    def name(self, index: int | None) -> str:
        return "" if index is None or index == NO_INDEX else self.strings[index]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ProfileError(f"corrupt payload: {what}")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values if len(values) > 1 else values[0]

    def string(self, what: str) -> str:
        n = self.take("<I", what)
        if self.at + n > len(self.data):
            raise ProfileError(f"corrupt payload: {what}")
        s = self.data[self.at:self.at + n].decode("utf-8", errors="replace")
        self.at += n
        return s

    def count(self, min_bytes: int, what: str) -> int:
        n = self.take("<I", what)
        if n * min_bytes > len(self.data) - self.at:
            raise ProfileError(f"corrupt payload: {what}")
        return n


def _opt(v: int) -> int | None:
    return None if v == NO_INDEX else v


def decode(data: bytes) -> Profile:
    if data[:8] != MAGIC:
        raise ProfileError("not an oversub profile (wrong magic number)")
    if len(data) < HEADER_BYTES:
        raise ProfileError("truncated: the header is incomplete")
    version, header, length, crc, reserved = struct.unpack_from("<IIQII", data, 8)
    if not OLDEST_VERSION <= version <= VERSION:
        between = " and " if VERSION == OLDEST_VERSION + 1 else " to "
        raise ProfileError(f"format version {version}, this reader knows versions "
                           f"{OLDEST_VERSION}{between}{VERSION}")
    if header != HEADER_BYTES or reserved != 0:
        raise ProfileError("corrupt header")
    have = len(data) - HEADER_BYTES
    if length > have:
        raise ProfileError(f"truncated: the header announces {length} payload bytes, "
                           f"the file has {have}")
    if length < have:
        raise ProfileError("trailing bytes after the declared payload length")
    payload = data[HEADER_BYTES:]
    if zlib.crc32(payload) != crc:
        raise ProfileError("checksum mismatch: the file is corrupt")
    r = _Reader(payload)
    source, cupti = r.take("<BB", "summary")
    if source >= len(SOURCES) or cupti > 1:
        raise ProfileError("corrupt payload: summary flags")
    iterations, total, first = r.take("<IQQ", "summary")
    marker, program = r.string("summary"), r.string("summary")
    cap, h2d, d2h, kns = r.take("<QQQQ", "summary")
    p = Profile(SOURCES[source], cupti == 1, iterations, total, first, marker, program,
                cap, h2d, d2h, kns)
    p.strings = [r.string("string table") for _ in range(r.count(4, "string count"))]

    def string_ok(i: int) -> bool:
        return i == NO_INDEX or i < len(p.strings)

    for _ in range(r.count(4, "call-site count")):
        frames = []
        for _ in range(r.count(16, "frame count")):
            module, offset, symbol = r.take("<IQI", "frame")
            if not string_ok(module) or not string_ok(symbol):
                raise ProfileError("corrupt payload: frame string index")
            frames.append(Frame(module, offset, symbol))
        p.call_sites.append(frames)
    for _ in range(r.count(33, "allocation count")):
        ordinal, size, address, alloc_at, free_at, ll, site = r.take("<IQQIIBI", "allocation")
        if ll > 1:
            raise ProfileError("corrupt payload: allocation flags")
        if site != NO_INDEX and site >= len(p.call_sites):
            raise ProfileError("corrupt payload: allocation call-site index")
        p.allocations.append(Allocation(_opt(ordinal), size, address, alloc_at, _opt(free_at),
                                        ll == 1, _opt(site)))
    launch_flags = version >= 2  # version 2 adds the flags byte after the buffer table
    for _ in range(r.count(21 if launch_flags else 20, "launch count")):
        name, duration, corr = r.take("<IQI", "launch")
        if name >= len(p.strings):
            raise ProfileError("corrupt payload: launch name index")
        n = r.count(4, "launch")
        buffers = list(r.take(f"<{n}I", "launch buffer index")) if n > 1 else (
            [r.take("<I", "launch buffer index")] if n == 1 else [])
        if any(b >= len(p.allocations) for b in buffers):
            raise ProfileError("corrupt payload: launch buffer index")
        flags = 0
        if launch_flags:
            flags = r.take("<B", "launch")
            if flags & ~LAUNCH_KNOWN_FLAGS:
                raise ProfileError("corrupt payload: launch flags")
        p.launches.append(Launch(name, duration, corr, buffers, flags))
    for _ in range(r.count(25, "copy count")):
        before, kind, size, duration, buffer = r.take("<IBQQI", "copy")
        if kind > 4:
            raise ProfileError("corrupt payload: copy kind")
        if buffer != NO_INDEX and buffer >= len(p.allocations):
            raise ProfileError("corrupt payload: copy buffer index")
        if before > len(p.launches):
            raise ProfileError("corrupt payload: copy position")
        p.copies.append(Copy(before, COPY_KINDS[kind], size, duration, _opt(buffer)))
    if r.at != len(payload):
        raise ProfileError("corrupt payload: bytes after the last table")
    return p


def scale_profile(p: Profile, scale: float) -> None:
    """Every buffer's and copy's bytes times scale, rounded up to 4 bytes (at least 4;
    0 stays 0): what oversub-replay --scale does, so that the simulator reading the
    scaled file and the replay describe the same work."""
    def s(b: int) -> int:
        return 0 if b == 0 else max(4, -(-b * scale // 4) * 4)
    for a in p.allocations:
        a.bytes = int(s(a.bytes))
    for c in p.copies:
        c.bytes = int(s(c.bytes))


def read_profile(path: str | Path) -> Profile:
    try:
        data = Path(path).read_bytes()
        if str(path).endswith(".gz"):
            data = gzip.decompress(data)
    except OSError as e:
        raise ProfileError(f"{path}: {e.strerror or e}") from None
    except EOFError as e:
        raise ProfileError(f"{path}: {e}") from None
    return decode(data)


# ---- writing ------------------------------------------------------------------------

def _idx(v: int | None) -> int:
    return NO_INDEX if v is None else v


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<I", len(b)) + b


def encode(p: Profile) -> bytes:
    """The file's bytes for p (header and payload). Tables are written as they are:
    the caller keeps allocations in the documented order and indices in range; the
    result is checked by decoding it, so an inconsistent Profile raises ProfileError."""
    out = [struct.pack("<BBIQQ", SOURCES.index(p.source), int(p.cupti), p.iterations_seen,
                       p.total_launches, p.first_launch),
           _str(p.marker), _str(p.program),
           struct.pack("<QQQQ", p.capacity_bytes, p.h2d_bytes_per_s, p.d2h_bytes_per_s,
                       p.iteration_kernel_ns),
           struct.pack("<I", len(p.strings))]
    out += [_str(s) for s in p.strings]
    out.append(struct.pack("<I", len(p.call_sites)))
    for frames in p.call_sites:
        out.append(struct.pack("<I", len(frames)))
        out += [struct.pack("<IQI", f.module, f.offset, f.symbol) for f in frames]
    out.append(struct.pack("<I", len(p.allocations)))
    out += [struct.pack("<IQQIIBI", _idx(a.ordinal), a.bytes, a.address, a.alloc_at,
                        _idx(a.free_at), int(a.long_lived), _idx(a.call_site))
            for a in p.allocations]
    out.append(struct.pack("<I", len(p.launches)))
    for launch in p.launches:
        out.append(struct.pack(f"<IQII{len(launch.buffers)}IB", launch.name, launch.duration_ns,
                               launch.correlation_id, len(launch.buffers), *launch.buffers,
                               launch.flags))
    out.append(struct.pack("<I", len(p.copies)))
    out += [struct.pack("<IBQQI", c.before_launch, COPY_KINDS.index(c.kind), c.bytes,
                        c.duration_ns, _idx(c.buffer)) for c in p.copies]
    payload = b"".join(out)
    data = MAGIC + struct.pack("<IIQII", VERSION, HEADER_BYTES, len(payload),
                               zlib.crc32(payload), 0) + payload
    decode(data)  # the writer never produces a file the readers refuse
    return data


def write_profile(path: str | Path, p: Profile) -> None:
    """Writes p to path (gzip-compressed when the name ends in .gz), atomically."""
    data = encode(p)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
