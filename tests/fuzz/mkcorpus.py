#!/usr/bin/env python3
"""mkcorpus.py: writes the seed corpora of the fuzz targets (docs/FUZZ.md).

usage:
  tests/fuzz/mkcorpus.py     (re)write tests/fuzz/corpus/{topo,cpulist,cli,http,metrics,stealmx,watch}/seed-*

Seeds are named seed-*; inputs kept because they once crashed a target (the
regression inputs, named after the bug) sit beside them and are never
touched here.  The topology seeds are the fixtures of tests/fixtures/sysfs
(symlinks followed) in fuzz_topo's record form, small ones only: a tree of
2 000 files costs the fuzzer as much as a hundred small ones.  The watch
seeds are statistics segments laid out as lib/statseg.h says, their offsets
measured by compiling a small program against it.
"""
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(HERE, "corpus")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "sysfs")
TOPO_MAX_FILES = 250
# Broken fixtures derived from a big one differ from it in one file: one of
# them is seed enough (the fuzzer breaks files itself).
TOPO_SKIP = {"bad-cpulist", "bad-nodecpu", "bad-number", "missing-file", "hybrid"}


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear(target):
    d = os.path.join(CORPUS, target)
    if os.path.isdir(d):
        for n in os.listdir(d):
            if n.startswith("seed-"):
                os.unlink(os.path.join(d, n))


# ---- topo: fixture trees as "PATH\nCONTENT" records separated by NUL ----

def tree_records(top):
    recs = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        dirnames.sort()
        rel = os.path.relpath(dirpath, top)
        if not filenames and not dirnames and rel != ".":
            recs.append(rel + "/")
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            with open(p, "rb") as f:
                content = f.read()
            r = os.path.relpath(p, top).encode()
            recs.append(r + b"\n" + content)
    return [r.encode() if isinstance(r, str) else r for r in recs]


# The four-CPU machine of tests/test_topo.c (mini): both sibling files,
# both hybrid PMUs, a package-wide LLC, two nodes with a hole in their ids.
MINI = [
    ("devices/system/cpu/online", "0-3\n"),
    ("devices/system/cpu/present", "0-3\n"),
    ("devices/system/cpu/cpu0/topology/physical_package_id", "0\n"),
    ("devices/system/cpu/cpu0/topology/core_id", "0\n"),
    ("devices/system/cpu/cpu0/topology/core_cpus_list", "0-1\n"),
    ("devices/system/cpu/cpu0/cache/index0/level", "1\n"),
    ("devices/system/cpu/cpu0/cache/index0/type", "Instruction\n"),
    ("devices/system/cpu/cpu0/cache/index3/level", "3\n"),
    ("devices/system/cpu/cpu0/cache/index3/type", "Unified\n"),
    ("devices/system/cpu/cpu0/cache/index3/shared_cpu_list", "0-1\n"),
    ("devices/system/cpu/cpu0/cpu_capacity", "1024\n"),
    ("devices/system/cpu/cpu1/topology/physical_package_id", "0\n"),
    ("devices/system/cpu/cpu1/topology/core_id", "0\n"),
    ("devices/system/cpu/cpu1/topology/core_cpus_list", "0-1\n"),
    ("devices/system/cpu/cpu1/cache/index3/level", "3\n"),
    ("devices/system/cpu/cpu1/cache/index3/type", "Unified\n"),
    ("devices/system/cpu/cpu1/cache/index3/shared_cpu_list", "0-1\n"),
    ("devices/system/cpu/cpu1/cpu_capacity", "300\n"),
    ("devices/system/cpu/cpu2/topology/physical_package_id", "1\n"),
    ("devices/system/cpu/cpu2/topology/core_id", "0\n"),
    ("devices/system/cpu/cpu2/topology/thread_siblings_list", "2\n"),
    ("devices/system/cpu/cpu2/cpu_capacity", "1024\n"),
    ("devices/system/cpu/cpu3/topology/physical_package_id", "1\n"),
    ("devices/system/cpu/cpu3/topology/core_id", "1\n"),
    ("devices/system/cpu/cpu3/topology/thread_siblings_list", "3\n"),
    ("devices/system/cpu/cpu3/cpu_capacity", "1024\n"),
    ("devices/system/node/online", "0,3\n"),
    ("devices/system/node/node0/cpulist", "0-1\n"),
    ("devices/system/node/node0/distance", "10 20\n"),
    ("devices/system/node/node3/cpulist", "2-3\n"),
    ("devices/system/node/node3/distance", "20 10\n"),
    ("devices/cpu_atom/cpus", "2-3\n"),
    ("devices/cpu_core/cpus", "0-1\n"),
    ("cbcmn-allowed", "1-3\n"),
]


def topo():
    clear("topo")
    for name in sorted(os.listdir(FIXTURES)):
        if name in TOPO_SKIP:
            continue
        top = os.path.join(FIXTURES, name)
        recs = tree_records(top)
        if not recs or len(recs) > TOPO_MAX_FILES:
            continue
        write("topo", name, b"\0".join(recs))
    write("topo", "mini", "\0".join(p + "\n" + c for p, c in MINI))
    # Without node/ (no NUMA) and without caches: the fallbacks.
    nonuma = [(p, c) for p, c in MINI if "/node/" not in p]
    write("topo", "mini-nonuma", "\0".join(p + "\n" + c for p, c in nonuma))


# ---- cpulist: two bytes of bitmap size, then the text ----

def cpulist():
    clear("cpulist")
    lists = ["0-3,8,10-11\n", "0\n", "", "\n", "0-4095", "1,3,5-7", "cpus:0-3,8", "cpus:5",
             "depth-first", "breadth-first", "random", "cpus:0,32,64,1", "3-1", "0,,1", "0-"]
    for i, s in enumerate(lists):
        nbits = 64 if i % 2 else 4096
        write("cpulist", "%02d" % i, struct.pack("<H", nbits - 1) + s.encode())


# ---- cli: a tool byte, then NUL-separated arguments ----

TOOLS = ["cbcmn-affinity", "cbcmn-run", "cbcmn-bench", "cbcmn-demo", "cbcmn-loadtest",
         "cbcmn-stat", "cbcmn-top"]
CLI = [
    (0, ["-n", "8", "--policy", "breadth-first"]),
    (0, ["--sysfs-root", "tests/fixtures/sysfs/epyc8n", "--json"]),
    (0, ["--policy", "cpus:0-3,8", "-s", "0x10", "-f", "2"]),
    (0, ["--sysfs-root", "x", "-n", "4", "--steal-matrix", "steals.txt"]),
    (1, ["fib", "--workers", "2"]),
    (1, ["skew", "--policy", "breadth-first", "--duration", "1", "--json"]),
    (1, ["echo", "--size", "50", "--duration", "5", "--seed=7"]),
    (1, ["skew", "--bpf", "--futex-tp", "-v"]),
    (2, ["fib", "--workers", "2", "--reps", "3"]),
    (2, ["echo", "--conns", "100", "--duration", "0.5", "--msg-size", "64", "--no-multishot"]),
    (2, ["http", "--server-spin-ns", "none", "--bpf-no", "sched"]),
    (3, ["-n", "30", "-w", "2"]),
    (4, ["-d", "0.5", "-n", "1000", "-i", "2000"]),
    (4, ["-c", "200", "-p", "4", "-n", "0", "-i", "0", "-S", "-1"]),
    (4, ["-P", "8080", "--proto", "http", "--no-http", "-C", "3", "-b", "256", "-t", "2"]),
    (5, ["-p", "1234", "-i", "2", "-c", "0"]),
    (5, ["-p", "1234", "--json", "--futex-tp"]),
    (6, ["-b", "-n", "3", "-d", "0.5", "-p", "1234"]),
    (6, ["--json", "-n", "10", "--no-bpf", "-p", "1234"]),
    (6, ["-b", "-w", "2", "-o", "out.txt", "--", "build/bin/cbcmn-run", "skew"]),
    (6, ["--bpf-no", "futex", "--no-color", "-p", "1"]),
]


def cli():
    clear("cli")
    for i, (tool, args) in enumerate(CLI):
        write("cli", "%02d-%s" % (i, TOOLS[tool]), bytes([tool]) + "\0".join(args).encode())


# ---- http: 0 then a request stream, or 1 then a response stream ----

def http():
    clear("http")
    req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    hello = ("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Type: text/plain\r\n"
             "Connection: keep-alive\r\n\r\nhello\n")
    seeds = [
        (0, req), (0, req * 3), (0, req[:10]),
        (0, "POST /x HTTP/1.0\r\nContent-Length: 0\r\nA:\tb \r\n\r\n"),
        (0, "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        (1, hello), (1, hello * 2), (1, hello[:30]),
        (1, "HTTP/1.1 204 \r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        (1, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"),
    ]
    for i, (mode, text) in enumerate(seeds):
        write("http", "%02d" % i, bytes([mode]) + text.encode())


# ---- metrics: the read size less 1, then what a scrape client sends ----

def metrics():
    clear("metrics")
    prom = ("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;"
            "version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n")
    seeds = [
        (255, prom), (0, prom), (6, prom),
        (255, "HEAD /metrics?x=1 HTTP/1.0\n\n"),
        (255, "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;q=0.0\r\n\r\n"),
        (255, "POST /metrics HTTP/1.1\r\n\r\n"),
        (255, "GET / HTTP/1.1\r\n\r\n"),
        (255, "GET  /metrics HTTP/1.1\r\n\r\n"),
        (1, "GET /metrics HTTP/1.1\r\n"),
    ]
    for i, (step, text) in enumerate(seeds):
        write("metrics", "%02d" % i, bytes([step]) + text.encode())


# ---- stealmx: matrix files ----

def stealmx():
    clear("stealmx")
    seeds = [
        "# thief victim steals tasks\n1 0 10 20\n2 0 5 5\n3 2 7 14\n0 3 4 4\n",
        "1 0 3\n",
        "# nothing\n\n",
        "16 0 3 3\r\n0 16 1 # comment\n\t2 1 9\n",
        "0 1048575 1\n",
    ]
    for i, text in enumerate(seeds):
        write("stealmx", "%02d" % i, text)


# ---- watch: one flags byte, the segment's length (2 bytes), the segment, then
# bytes written over its start once it is open ----

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include "statseg.h"
#define O(f) (unsigned)offsetof(struct cbcmn__seg_hdr, f)
int main(void)
{
	printf("%u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u\n",
	       (unsigned)sizeof(struct cbcmn__seg_hdr), (unsigned)sizeof(struct cbcmn__seg_exec),
	       (unsigned)_Alignof(struct cbcmn__seg_exec), O(magic), O(version), O(hdr_size),
	       O(exec_size), O(slots_off), O(stride), O(nexec), O(pid), O(start_ns), O(alive),
	       O(nlive), O(ext_spawns), (unsigned)CBCMN__SEG_VERSION);
	return 0;
}
"""


def watch():
    clear("watch")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "p.c"), os.path.join(d, "p")
        with open(src, "w") as f:
            f.write(PROBE)
        subprocess.run(["cc", "-std=gnu11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "lib"),
                        "-I" + os.path.join(ROOT, "lib", "include"), src, "-o", exe], check=True)
        v = [int(x) for x in subprocess.run([exe], check=True, capture_output=True,
                                            text=True).stdout.split()]
    (hdr, ex, align, o_magic, o_version, o_hdr, o_exec, o_slots, o_stride, o_nexec, o_pid,
     o_start, o_alive, o_nlive, o_spawns, version) = v
    magic = 0x3174617473636263

    def segment(nexec, slots_off, stride, spawns=0):
        size = slots_off + stride * nexec
        b = bytearray(max(size, hdr))
        struct.pack_into("<Q", b, o_magic, magic)
        struct.pack_into("<IIIIII", b, o_version, version, hdr, ex, slots_off, stride, nexec)
        struct.pack_into("<q", b, o_start, 12345)
        struct.pack_into("<II", b, o_alive, 1, nexec)
        struct.pack_into("<Q", b, o_spawns, spawns)
        return bytes(b)

    # The runtime's own layout (a page each), then the tightest one the
    # reader accepts (slots right after the header, stride = slot size).
    tight = (hdr + align - 1) // align * align
    # Rewritten once open: a header claiming 1024 slots a page apart.
    huge = bytearray(segment(1, 4096, 4096)[:hdr])
    struct.pack_into("<III", huge, o_slots, 4096, 4096, 1024)
    struct.pack_into("<Q", huge, o_spawns, 2 ** 64 - 1)
    seeds = [
        (0, segment(1, 4096, 4096), b""),
        (0, segment(2, 4096, 4096, spawns=3), b""),
        (0, segment(3, tight, ex), b""),
        (0, segment(1, tight, ex)[:hdr], b""),   # slots cut off: refused
        (2, segment(1, 4096, 4096), b""),        # unsealed: refused
        (1, segment(1, 4096, 4096), b""),        # pid 0 kept: refused
        (0, segment(1, 4096, 4096), bytes(huge)),
        (0, segment(2, tight, ex), b"\xff" * (tight + ex)),
    ]
    for i, (flags, seg, later) in enumerate(seeds):
        write("watch", "%02d" % i, bytes([flags]) + struct.pack("<H", len(seg)) + seg + later)


def main():
    if len(sys.argv) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    topo()
    cpulist()
    cli()
    http()
    metrics()
    stealmx()
    watch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
