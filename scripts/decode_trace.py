#!/usr/bin/env python3
"""When the split path's CTAs start and end (decode_split.cu, PC_DECODE_TRACE).

  scripts/build_decode_probe.sh -DPC_DECODE_TRACE=1 -DPC_DECODE_SWEEP_ONLY -o devbin/decode_trace
  devbin/decode_trace trace 1 32768 1024 /tmp/d            (on the GPU)
  scripts/decode_trace.py /tmp/d

Prints the spread of the partition CTAs' start and end times and durations
(ns from the first start), how many CTAs each SM ran, the merge CTAs' start,
the end of their wait for the partitions and their end, and the mean
duration of the first and last partitions.
"""
import collections
import statistics
import sys


def quantile(values, f):
    return values[min(len(values) - 1, int(f * len(values)))]


def report(path):
    parts, merges = [], []
    with open(path) as f:
        for line in f:
            v = line.split()
            (parts if v[0] == "P" else merges).append(tuple(map(int, v[1:])))
    if not parts:
        print(path, "no partition CTAs")
        return
    t0 = min(p[3] for p in parts)
    print(path, "partition CTAs", len(parts), "merge CTAs", len(merges))
    for name, values in (("start", [p[3] - t0 for p in parts]), ("end", [p[4] - t0 for p in parts]),
                         ("duration", [p[4] - p[3] for p in parts])):
        values.sort()
        print("  %-8s ns: min %d p10 %d p50 %d p90 %d max %d" % (name, values[0], quantile(values, 0.1),
                                                                quantile(values, 0.5), quantile(values, 0.9), values[-1]))
    per_sm = collections.Counter(p[2] for p in parts)
    print("  CTAs per SM (count: SMs):", sorted(collections.Counter(per_sm.values()).items()), "SMs used", len(per_sm))
    if merges:
        start = sorted(m[2] - t0 for m in merges)
        waited = sorted(m[3] - t0 for m in merges)
        end = sorted(m[4] - t0 for m in merges)
        print("  merge: start p50 %d; wait done min %d p50 %d max %d; end p50 %d max %d" %
              (quantile(start, 0.5), waited[0], quantile(waited, 0.5), waited[-1], quantile(end, 0.5), end[-1]))
    by_partition = collections.defaultdict(list)
    for p in parts:
        by_partition[p[0]].append(p[4] - p[3])
    means = [(k, int(statistics.mean(v))) for k, v in sorted(by_partition.items())]
    print("  mean duration by partition: first", means[:4], "last", means[-2:])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        report(p)
