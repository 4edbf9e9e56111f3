#!/usr/bin/env python3
"""Where a kernel's SASS lies, by source line, without a disassembler.

This machine has no nvdisasm or cuobjdump; a cubin built with -lineinfo
still carries the line table (.debug_line) that maps each SASS address to a
file and line, and readelf decodes it. That is enough to see the code's
layout: which source lines each stretch of instructions comes from, and so
where cold paths sit between hot ones (docs/performance.md, session 23).

  nvcc -std=c++20 -O3 --expt-relaxed-constexpr -lineinfo -Ilib/include \\
       -Ikernels/src -Ikernels/include -arch=sm_90a -cubin \\
       kernels/src/prefill/attn_sm90_ws.cu -o /tmp/ws.cubin
  scripts/sass_layout.py /tmp/ws.cubin                 # the kernels: index, instructions, name
  scripts/sass_layout.py /tmp/ws.cubin -k 6 --map      # kernel 6, a line per 64 instructions
  scripts/sass_layout.py /tmp/ws.cubin -k 6 --lines    # instructions per source line, most first
  scripts/sass_layout.py /tmp/ws.cubin -k 6 --lines --range 1152 2720   # the same over a stretch
  scripts/sass_layout.py /tmp/ws.cubin -k 6 --where attn_sm90_ws.cu:1693
                                                       # the address ranges of a line

An instruction is 16 bytes. Counts are static (instructions laid out), not
executed. Where several line entries share an address, the last (the
innermost inlined line) names it.
"""
import argparse
import collections
import re
import subprocess
import sys


def run_readelf(args):
    try:
        return subprocess.run(["readelf", *args], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        sys.exit("sass_layout: readelf not found (binutils)")


def text_sections(cubin):
    """[(name, size in bytes)] of the .text.* sections, in section order."""
    out = []
    for line in run_readelf(["-S", "-W", cubin]).splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+PROGBITS\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            out.append((m.group(1), int(m.group(2), 16)))
    return out


def line_sequences(cubin):
    """The line table's sequences, in table order: [[(address, file, line)]]."""
    seqs, cur, fname, last = [], [], None, -1
    for ln in run_readelf(["--debug-dump=decodedline", cubin]).splitlines():
        m = re.match(r"^(\S+):$", ln)
        if m:
            fname = m.group(1).split("/")[-1]
            continue
        m = re.match(r"^(\S+)\s+(\d+)\s+(0x[0-9a-f]+|\d+)", ln)
        if not m or fname is None:
            continue
        addr = int(m.group(3), 0)
        if addr < last and cur:  # addresses restart: the next kernel's sequence
            seqs.append(cur)
            cur = []
        last = addr
        cur.append((addr, fname, int(m.group(2))))
    if cur:
        seqs.append(cur)
    return seqs


def spans(seq, size):
    """[(start, end, 'file:line')], each address named by its last entry."""
    by = collections.OrderedDict()
    for addr, f, line in seq:
        by[addr] = f"{f}:{line}"
    items = sorted(by.items())
    out = []
    for i, (addr, name) in enumerate(items):
        end = items[i + 1][0] if i + 1 < len(items) else max(size, addr + 16)
        out.append((addr, end, name))
    return out


def short_name(mangled):
    m = re.search(r"(\w+?)(INS|I[0-9N])", mangled)
    base = m.group(1) if m else mangled
    base = re.sub(r"^.*?\d+(?=[a-z_]+$)", "", base)
    params = re.findall(r"E(\d+)|Li(\d+)E|Lb([01])E", mangled)
    tail = ",".join(next(x for x in p if x) for p in params)
    return f"{base}<{tail}>" if tail else base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cubin")
    ap.add_argument("-k", "--kernel", help="index from the listing, or a substring of the section name")
    ap.add_argument("--map", action="store_true", help="a line per window: its top source lines (the default)")
    ap.add_argument("--window", type=int, default=64, help="instructions per --map line (64)")
    ap.add_argument("--lines", action="store_true", help="instructions per source line, most first")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--where", help="FILE:LINE: the address ranges (in instructions) it occupies")
    ap.add_argument("--range", nargs=2, type=int, metavar=("FIRST", "END"),
                    help="--lines over instructions FIRST .. END only (a loop's stretch, from --map)")
    a = ap.parse_args()
    if a.window < 1:
        ap.error("--window must be at least 1")

    sections = text_sections(a.cubin)
    seqs = line_sequences(a.cubin)
    if not sections:
        sys.exit(f"sass_layout: no .text sections in {a.cubin}")
    if len(seqs) != len(sections):
        sys.exit(f"sass_layout: {len(seqs)} line sequences for {len(sections)} kernels "
                 "(built without -lineinfo, or a layout this script does not know)")
    for (name, size), seq in zip(sections, seqs):
        if seq[-1][0] >= size:
            sys.exit(f"sass_layout: a line sequence runs past {name}'s {size} bytes: cannot pair them")

    if a.kernel is None:
        for i, (name, size) in enumerate(sections):
            print(f"{i:3d} {size // 16:7d}  {short_name(name)}")
        return
    if a.kernel.isdigit():
        idx = int(a.kernel)
    else:
        hits = [i for i, (n, _) in enumerate(sections) if a.kernel in n]
        if len(hits) != 1:
            sys.exit(f"sass_layout: '{a.kernel}' names {len(hits)} kernels; give an index")
        idx = hits[0]
    if not 0 <= idx < len(sections):
        sys.exit(f"sass_layout: no kernel {idx} (0..{len(sections) - 1})")
    name, size = sections[idx]
    sp = spans(seqs[idx], size)
    print(f"# {short_name(name)}: {size // 16} instructions")
    if a.where:
        for start, end, n in sp:
            if n == a.where:
                print(f"{start // 16:7d} .. {end // 16:7d}  ({(end - start) // 16})")
    elif a.lines:
        cnt = collections.Counter()
        lo, hi = (a.range[0] * 16, a.range[1] * 16) if a.range else (0, size)
        for start, end, n in sp:
            cnt[n] += max(0, min(end, hi) - max(start, lo)) // 16
        print(f"# {sum(cnt.values())} instructions in range")
        for n, c in cnt.most_common(a.top):
            print(f"{c:6d} {n}")
    else:  # --map, the default view of one kernel
        w = collections.defaultdict(collections.Counter)
        step = a.window * 16
        for start, end, n in sp:
            pos = start
            while pos < end:  # a long span counts in every window it crosses
                nxt = min(end, (pos // step + 1) * step)
                w[pos // step][n] += (nxt - pos) // 16
                pos = nxt
        for k in sorted(w):
            top = " ".join(f"{n}x{c}" for n, c in w[k].most_common(3))
            print(f"{k * a.window:7d} {top}")


if __name__ == "__main__":
    main()
