#!/usr/bin/env python3
"""Where the warp-specialised prefill kernel's consumers spend a work tile.

Reads the clock stamps a developer build writes (attn_sm90_ws.cu,
PAGECHECK_WS_TRACE):

  scripts/build_prefill_dev.sh trace -DPAGECHECK_WS_TRACE=1
  WS_TRACE=/tmp/t build-sm90dev/prefill_dev_trace trace 16 512 16   (on the GPU)
  scripts/prefill_trace.py [--by-item] /tmp/t.prefill /tmp/t.fmha

and prints, per number of key tiles, the mean cycles of each phase of a
work tile (from one work tile's start to the next one's, per consumer
warpgroup), then a least-squares fit total = a * key tiles + b: b is what
a work tile's start and end cost beside its steady key tiles.
Phases: decode (the work tile's fields), qwait (its Q), turn0 (the wait for
the first turn), S0 (the first S GEMM alone), mid (the steady key tiles),
lastPV (the last turn's wait and its P V), epi (normalise and store the
output), next (to the next work tile's start).
A build with -DPAGECHECK_WS_TRACE=2 also splits the steady key tiles, per
key tile: waiting for K and the turn, issuing S and P V and S done, the
softmax, waiting for P V, rescaling O and packing P. One with
-DPAGECHECK_WS_TRACE=3 instead splits the epilogue: row sums, scales and
LSEs; rows through shared memory; the proxy fence and the Q release; the
global stores. One with -DPAGECHECK_WS_TRACE=5 splits "mid" where the
early S_0 (PAGECHECK_WS_EARLY_S) adds its cost, per key-tile count: the
softmax of an S_0 that came early (with P and the previous output's
release), the steady key tiles, decoding the next work tile and the early
test, the row sums, the early S_0's query and K tile waits, and the last V
tile's wait and the turn.
--by-item adds the same phases by each CTA's k-th work tile (a CTA's first
work tile meets every other CTA's first loads), with the row sums of a
TRACE=3 build.
"""
import collections
import sys

NAMES = ["decode", "qwait", "turn0", "S0", "mid", "lastPV", "epi", "next"]
LOOP_NAMES = ["K+turn", "issue+S", "softmax", "PVwait", "rescale+P"]
EPI_NAMES = ["sums+lse", "smem", "fence+release", "stores"]
EARLY_NAMES = ["S0soft", "steady", "decode+test", "rowsums", "nextQK", "V+turn"]


def load(path):
    recs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            v = list(map(int, line.split()))
            cta, wg, item = v[:3]
            slots = v[3:]
            recs[(cta, wg)].append((item, slots[0:8], slots[8], slots[9], slots[10:15], slots[15]))
    return recs


def phases_of(items, i):
    """The eight phases (NAMES) of work tile i of one warpgroup's sorted
    stamps, the last one up to work tile i + 1's start."""
    t = items[i][1]
    return [t[j + 1] - t[j] for j in range(7)] + [items[i + 1][1][0] - t[7]]


def report_by_item(path, first=16):
    """Mean phases of each CTA's k-th work tile (k = the stamp's item), so
    that a CTA's first work tile, whose loads meet every other CTA's first,
    shows apart from the steady ones (session 21: three times the second
    at 16 x 512)."""
    by_item = collections.defaultdict(lambda: [0.0] * 11)
    for items in load(path).values():
        items.sort()
        for i, (item, t, tiles, _, extra, mode) in enumerate(items[:-1]):
            if tiles == 0 or min(t) == 0 or item >= first:
                continue
            acc = by_item[item]
            for j, d in enumerate(phases_of(items, i)):
                acc[j] += d
            acc[8] += tiles
            acc[9] += 1
            if mode == 3 and extra[0] > 0:
                acc[10] += extra[0] - t[6]  # row sums, scales and LSEs (with the next tile's fetch)
    print(path + " (by each CTA's item)")
    print(" item  count  tiles " + " ".join("%8s" % n for n in NAMES) + "    total     sums")
    for item in sorted(by_item):
        acc = by_item[item]
        n = acc[9]
        mean = [a / n for a in acc[:8]]
        print("%5d %6d %6.2f " % (item, n, acc[8] / n) + " ".join("%8.0f" % a for a in mean) +
              " %8.0f %8s" % (sum(mean), "%.0f" % (acc[10] / n) if acc[10] else "-"))


def report(path):
    by_tiles = collections.defaultdict(lambda: [0.0] * 9)
    loop = [0.0] * 5
    steady = 0
    epi = [0.0] * 4
    epi_n = 0
    early = collections.defaultdict(lambda: [0.0] * 7)  # (key tiles, began early) -> sums, count
    for items in load(path).values():
        items.sort()
        for i, (_, t, tiles, _, sums, mode) in enumerate(items[:-1]):
            if tiles == 0 or min(t) == 0:
                continue
            if mode == 3:
                if min(sums[:3]) > 0:
                    marks = [t[6]] + sums[:3] + [t[7]]
                    for j in range(4):
                        epi[j] += marks[j + 1] - marks[j]
                    epi_n += 1
            elif mode == 5:
                s10, s11, s12, s13, s14 = sums
                pre = s10 > 0
                start = s10 if pre else t[4]
                after_test = s12 if s12 else s11
                after_sums = s13 if s13 else after_test
                after_qk = s14 if s14 else after_sums
                marks = [t[4], start, s11, after_test, after_sums, after_qk, t[5]]
                acc = early[(tiles, pre)]
                for j in range(6):
                    acc[j] += marks[j + 1] - marks[j]
                acc[6] += 1
            elif len(sums) == 5 and tiles > 1:
                for j in range(5):
                    loop[j] += sums[j]
                steady += tiles - 1
            acc = by_tiles[tiles]
            for j, d in enumerate(phases_of(items, i)):
                acc[j] += d
            acc[8] += 1
    print(path)
    print("tiles  count " + " ".join("%8s" % n for n in NAMES) + "    total per-tile")
    points = []
    for tiles in sorted(by_tiles):
        acc = by_tiles[tiles]
        n = acc[8]
        mean = [a / n for a in acc[:8]]
        total = sum(mean)
        points.append((tiles, total, n))
        print("%5d %6d " % (tiles, n) + " ".join("%8.0f" % a for a in mean) + " %8.0f %8.0f" % (total, total / tiles))
    if len(points) >= 2:
        w = sum(n for _, _, n in points)
        mx = sum(x * n for x, _, n in points) / w
        my = sum(y * n for _, y, n in points) / w
        sxx = sum(n * (x - mx) ** 2 for x, _, n in points)
        sxy = sum(n * (x - mx) * (y - my) for x, y, n in points)
        a = sxy / sxx if sxx else 0.0
        print("fit: total = %.0f cycles x key tiles + %.0f cycles" % (a, my - a * mx))
    if epi_n:
        print("epilogue (%d work tiles), cycles each: " % epi_n +
              ", ".join("%s %.0f" % (n, x / epi_n) for n, x in zip(EPI_NAMES, epi)) +
              "; total %.0f" % (sum(epi) / epi_n))
    if early:
        print("before the last turn (TRACE=5), cycles:")
        print("tiles early  count " + " ".join("%11s" % n for n in EARLY_NAMES))
        for (tiles, pre) in sorted(early):
            acc = early[(tiles, pre)]
            n = acc[6]
            print("%5d %5s %6d " % (tiles, "yes" if pre else "no", n) + " ".join("%11.0f" % (a / n) for a in acc[:6]))
    if steady and any(loop):
        print("steady key tiles (%d), cycles each: " % steady +
              ", ".join("%s %.0f" % (n, x / steady) for n, x in zip(LOOP_NAMES, loop)) +
              "; total %.0f" % (sum(loop) / steady))


if __name__ == "__main__":
    args = sys.argv[1:]
    by_item = "--by-item" in args
    args = [a for a in args if a != "--by-item"]
    if not args:
        sys.exit(__doc__)
    for p in args:
        report(p)
        if by_item:
            report_by_item(p)
