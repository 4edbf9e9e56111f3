#!/usr/bin/env python3
"""When each consumer warpgroup of the warp-specialised prefill kernel
issues, waits and computes, key tile by key tile, against the other one.

Reads the timeline a developer build writes (attn_sm90_ws.cu,
PAGECHECK_WS_TRACE=4: CTAs 0 and 1, every steady key tile, per warpgroup
the clocks at the loop's start, the turn taken, S done, softmax done, P V
done, P packed):

  scripts/build_prefill_dev.sh tl -DPAGECHECK_WS_TRACE=4
  WS_TRACE=/tmp/t build-sm90dev/prefill_dev_tl trace 8 2048 16   (on the GPU)
  scripts/prefill_timeline.py /tmp/t.timeline.prefill [FIRST [COUNT]]

prints COUNT key tiles of CTA 0 from the FIRST (default 40 and 12) as a
merged list of events in time order, then over all tiles of both CTAs: each
warpgroup's period between turns, the time from the turn to S done, the
softmax's length, how much of one warpgroup's softmax overlaps the other's,
and where in the other warpgroup's period each turn falls (0.5: ping-pong
as intended, both warpgroups' softmaxes apart; near 0: in phase).
"""
import bisect
import collections
import statistics
import sys

EVENTS = ["start", "turn", "S done", "softmax done", "PV done", "P packed"]


def load(path):
    tl = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            v = line.split()
            if len(v) != 9:
                continue
            cta, wg, _ = map(int, v[:3])
            tl[(cta, wg)].append(list(map(int, v[3:])))
    return tl


def overlap(a, b):
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tl = load(sys.argv[1])
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    w0, w1 = tl.get((0, 0), []), tl.get((0, 1), [])
    if not w0 or not w1:
        sys.exit("no timeline for CTA 0 in " + sys.argv[1])
    base = min(w0[0][0], w1[0][0])
    lo = w0[min(first, len(w0) - 1)][0]
    hi = w0[min(first + count, len(w0) - 1)][5]
    events = []
    for wg, rows in ((0, w0), (1, w1)):
        for i, r in enumerate(rows):
            for j, t in enumerate(r):
                if lo <= t <= hi:
                    events.append((t, wg, i, EVENTS[j]))
    events.sort()
    print("CTA 0, cycles from its first steady key tile (wg 0 left, wg 1 right):")
    for t, wg, i, name in events:
        label = "%s %d" % (name, i)
        print("%9d  %-22s %s" % (t - base, label if wg == 0 else "", label if wg == 1 else ""))
    stats = collections.defaultdict(list)
    for cta in (0, 1):
        rows = {wg: tl.get((cta, wg), []) for wg in (0, 1)}
        if not rows[0] or not rows[1]:
            continue
        for wg in (0, 1):
            mine, other = rows[wg], rows[1 - wg]
            turns_other = [r[1] for r in other]
            soft_other = [(r[2], r[3]) for r in other]
            for i in range(1, len(mine) - 1):
                r = mine[i]
                period = mine[i + 1][1] - r[1]
                if period <= 0 or period > 20000:
                    continue  # a work tile's boundary lies between
                stats["period %d" % wg].append(period)
                stats["turn->S %d" % wg].append(r[2] - r[1])
                stats["softmax %d" % wg].append(r[3] - r[2])
                k = bisect.bisect_right(turns_other, r[1]) - 1
                if 0 <= k < len(turns_other) - 1:
                    p_other = turns_other[k + 1] - turns_other[k]
                    if 0 < p_other < 20000:
                        stats["phase %d" % wg].append((r[1] - turns_other[k]) / p_other)
                j = bisect.bisect_left(soft_other, (r[2], 0))
                ov = sum(overlap((r[2], r[3]), soft_other[x]) for x in range(max(0, j - 2), min(len(soft_other), j + 2)))
                stats["softmax overlap %d" % wg].append(ov / max(1, r[3] - r[2]))
    print()
    for key in sorted(stats):
        v = stats[key]
        print("%-18s median %8.2f  p10 %8.2f  p90 %8.2f  (%d tiles)" %
              (key, statistics.median(v), sorted(v)[len(v) // 10], sorted(v)[9 * len(v) // 10], len(v)))


if __name__ == "__main__":
    main()
