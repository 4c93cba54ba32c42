"""The side file (perf.data.bpfsym): a magic, then append-only framed records.

Each frame is a fixed header (type, flags, payload length, CRC32 of the stored
payload) and the payload; a frame is written with one write() so that a writer
killed at any point leaves complete frames intact and at most a torn tail.
Payload layouts are all little-endian; the kernel blobs inside them (bpf_prog_info,
perf records) keep the byte order of the machine that wrote them, which the
HEADER record names.
"""

from __future__ import annotations

from construct import (
    Const,
    Enum,
    FlagsEnum,
    GreedyBytes,
    Int8ul,
    Int16ul,
    Int32sl,
    Int32ul,
    Int64sl,
    Int64ul,
    PascalString,
    Prefixed,
    PrefixedArray,
    Struct,
)

from . import perf as fp

MAGIC = b"BPFSYM\x00\x01"
VERSION = 1
file_magic = Const(MAGIC)

# record types
HEADER = 1
KALLSYMS = 2
SYSCTLS = 3
PROGRAM = 4
SIDEBAND = 5
STATS = 6
NOTE = 7
END = 8

FLAG_ZLIB = 1

frame = Struct(
    "type" / Int16ul,
    "flags" / FlagsEnum(Int16ul, zlib=FLAG_ZLIB),
    "length" / Int32ul,
    "crc32" / Int32ul,
)
FRAME_SIZE = frame.sizeof()
MAX_PAYLOAD = 1 << 30  # larger lengths are corruption, not data

# the integer before each variable-length part (hot readers unpack them with struct_of)
STR16_LENGTH = Int16ul
BLOB_COUNT = Int16ul
BLOB_NAME_LENGTH = Int8ul
BLOB_DATA_LENGTH = Int32ul

str16 = PascalString(STR16_LENGTH, "utf8")

header = Struct(
    "version" / Int16ul,
    "byteorder" / Enum(Int8ul, little=1, big=2),
    "kernel_release" / str16,
    "arch" / str16,
    "page_size" / Int32ul,
    "boot_id" / str16,
    "clock_id" / Int32sl,  # -1: perf's default clock
    "start_time" / Int64ul,
    "hostname" / str16,
    "tool_version" / str16,
)

# the kernel part of /proc/kallsyms, as text (usually zlib-compressed)
kallsyms = GreedyBytes

sysctls = PrefixedArray(Int16ul, Struct("name" / str16, "value" / str16))

# one program's bpf_prog_info and arrays exactly as the kernel returned them
ORIGINS = {0: "snapshot", 1: "sideband", 2: "rescan"}  # model.ORIGIN_*
program_blobs = PrefixedArray(
    BLOB_COUNT,
    Struct(
        "name" / PascalString(BLOB_NAME_LENGTH, "ascii"),
        "data" / Prefixed(BLOB_DATA_LENGTH, GreedyBytes),
    ),
)
program = Struct(
    "prog_id" / Int32ul,
    "origin" / Enum(Int8ul, **{name: value for value, name in ORIGINS.items()}),
    "load_time" / Int64sl,  # perf-clock ns of the PROG_LOAD event; -1: loaded before capture
    "missing" / str16,
    "blobs" / program_blobs,
)

# one raw side-band perf record (header included) as read from the ring of `cpu`; its
# sample_id trailer has the fields of SIDEBAND_SAMPLE_TYPE (the rings' attr.sample_type)
SIDEBAND_SAMPLE_TYPE = fp.SAMPLE_TID | fp.SAMPLE_TIME | fp.SAMPLE_CPU
sideband = Struct("cpu" / Int32ul, "record" / GreedyBytes)

stats = Struct(
    "time" / Int64ul,  # perf-clock ns when the stats were read
    "progs"
    / PrefixedArray(
        Int32ul,
        Struct(
            "prog_id" / Int32ul,
            "run_time_ns" / Int64ul,
            "run_cnt" / Int64ul,
            "recursion_misses" / Int64ul,
        ),
    ),
)

note = Struct("time" / Int64ul, "text" / str16)

end = Struct(
    "time" / Int64ul,
    "lost" / Int64ul,  # side-band records the kernel reported lost
    "programs" / Int32ul,
    "exit_status" / Int32sl,
)

PAYLOADS = {
    HEADER: header,
    SYSCTLS: sysctls,
    PROGRAM: program,
    SIDEBAND: sideband,
    STATS: stats,
    NOTE: note,
    END: end,
}
