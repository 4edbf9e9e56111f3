#!/usr/bin/env python3
"""The device check's extras (scripts/device_check.sh extras): one check per
feature that had not run on a GPU, each a subcommand that runs pagecheck,
checks what came out and prints one line per property, PASS: or FAIL: (SKIP:
where the machine cannot show it); exit 0 when nothing failed.

usage: device_extras_check.py [--pagecheck BIN] [--cpu] CHECK OUTDIR [options]

  reduce OUTDIR --kernel FAULTY.so   pagecheck reduce on GPU paths: the faulty example
                                     kernel's two entries, and split and prefill made to
                                     fail with --atol 0 --rtol 0; each reduced case is
                                     smaller, fails the same way, and its printed replay
                                     command exits 1
  shards OUTDIR                      --device all, --workers 2, --shard 0/2 + 1/2 and
                                     merge, against a plain run of the default suite
  forms OUTDIR                       kv_cache, paged_kv_cache NHD/HND and vLLM classic case
                                     files (written here from generated cases, stdlib
                                     only) through every path
  html OUTDIR                        --html of a timed GPU run (decode and prefill paths),
                                     and a screenshot with whatever headless browser exists
  memlimit OUTDIR                    PAGECHECK_DEVICE_MEMORY_LIMIT=1M makes direct an error
                                     naming both figures (exit 4); unset, the run passes
  make-forms SRC OUTDIR              only write the cache forms of one separate-form case

--cpu: a machine without a GPU (a CPU build): the same commands with only the
reference path, so that every option and file is exercised; properties that
need a GPU are SKIP. Needs only the Python standard library.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import threading
import time
from array import array

PAGECHECK = "pagecheck"
CPU = False
RESULTS = []
LOG_LOCK = threading.Lock()


def say(kind, text):
    with LOG_LOCK:
        print(f"{kind}: {text}", flush=True)
        RESULTS.append(kind)


def check(ok, text, detail=""):
    say("PASS" if ok else "FAIL", text + ("" if ok or not detail else f" ({detail})"))
    return ok


class Props:
    """The properties of one thing checked, logged one by one and summed up in
    one PASS line (with `summary`) or one FAIL line naming what failed."""

    def __init__(self, label):
        self.label, self.failed = label, []

    def check(self, ok, text, detail=""):
        with LOG_LOCK:
            print(f"  [{self.label}] {'ok' if ok else 'NOT'}: {text}" + (f" ({detail})" if detail and not ok else ""),
                  flush=True)
        if not ok:
            self.failed.append(text + (f" ({detail})" if detail else ""))
        return ok

    def done(self, summary):
        if self.failed:
            say("FAIL", f"{self.label}: " + "; ".join(self.failed))
        else:
            say("PASS", f"{self.label}: {summary}")


def guarded(label, fn, *args):
    """fn(*args); an exception (a report without the expected row, say) is a FAIL line, not a lost check."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001: any of them is a failed check
        import traceback
        with LOG_LOCK:
            traceback.print_exc()
        say("FAIL", f"{label}: the check itself failed: {type(e).__name__}: {e}")
        return None


def run(args, env=None, shell=False, timeout=300):
    """Runs a command; logs it, its exit code, time and the tail of its output
    in one piece (commands may run in parallel threads)."""
    shown = args if shell else " ".join(shlex.quote(a) for a in args)
    if env:
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shown
    full_env = dict(os.environ)
    full_env.update(env or {})
    t0 = time.monotonic()
    try:
        r = subprocess.run(args, env=full_env, shell=shell, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")
    lines = [f"$ {shown}", f"  exit {r.returncode} ({time.monotonic() - t0:.1f} s)"]
    for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        if text.strip():
            lines.append(f"  {name}:\n    " + "\n    ".join(text[-2500:].rstrip().splitlines()))
    with LOG_LOCK:
        print("\n".join(lines), flush=True)
    return r


def run_parallel(calls):
    """[(args, env)] run at once; their results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(run, [PAGECHECK] + [str(a) for a in args], env) for args, env in calls]
        return [f.result() for f in futures]


def pc(*args, env=None, timeout=300):
    return run([PAGECHECK] + [str(a) for a in args], env=env, timeout=timeout)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"  cannot read {path}: {e}")
        return None


def path_rows(report):
    """{(case name, path): row} of a JSON report."""
    return {(c["name"], p["path"]): p for c in report["cases"] for p in c["paths"]}


# ------------------------------------------------------------ safetensors ---

DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
              "I8": 1, "U8": 1, "BOOL": 1}
ARRAY_CODE = {1: "B", 2: "H", 4: "I", 8: "Q"}


def read_safetensors(path):
    """(tensors {name: [dtype, shape, bytes]} in file order, metadata)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        tensors[name] = [info["dtype"], list(info["shape"]), data[begin:end]]
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, data in tensors.values():
            f.write(data)


def ints(tensor):
    dtype, _, data = tensor
    code = {"I32": "i", "I64": "q"}[dtype]
    return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))


def permute(data, shape, element_size, perm):
    """The bytes of a row-major tensor transposed: out axis i is input axis perm[i]."""
    a = array(ARRAY_CODE[element_size])
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    out_shape = [shape[p] for p in perm]
    out_strides = [strides[p] for p in perm]
    last, last_stride = out_shape[-1], out_strides[-1]
    out = array(ARRAY_CODE[element_size])

    def walk(axis, base):
        if axis == len(out_shape) - 1:
            out.extend(a[base: base + last * last_stride: last_stride] if last_stride > 0 else a[base: base + 1])
            return
        for i in range(out_shape[axis]):
            walk(axis + 1, base + i * out_strides[axis])

    walk(0, 0)
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def interleave_pages(key, value, pages):
    """[pages, 2, ...] from two [pages, ...] tensors' bytes (keys at index 0)."""
    kp, vp = len(key) // pages, len(value) // pages
    return b"".join(key[p * kp:(p + 1) * kp] + value[p * vp:(p + 1) * vp] for p in range(pages))


def make_forms(src, outdir):
    """The combined and classic cache forms of a separate-form case file, as a
    runtime would save its own tensors (docs/case-format.md "The KV cache: four
    forms"); everything else (query, table, recorded output, metadata) as it
    was. Returns {form: file}."""
    tensors, metadata = read_safetensors(src)
    layout = metadata.get("kv_layout", "NHD")
    kdtype, kshape, kdata = tensors["key_cache"]
    vdtype, vshape, vdata = tensors["value_cache"]
    esize = DTYPE_SIZE[kdtype]
    if layout == "NHD":
        blocks, bs, heads, dk = kshape
    else:
        blocks, heads, bs, dk = kshape
    dv = vshape[-1]
    rest = {n: t for n, t in tensors.items() if n not in ("key_cache", "value_cache")}
    stem = os.path.splitext(os.path.basename(src))[0]
    os.makedirs(outdir, exist_ok=True)
    written = {}

    def emit(form, caches, kv_layout):
        meta = dict(metadata)
        meta.pop("kv_layout", None)
        if kv_layout:
            meta["kv_layout"] = kv_layout
        meta["description"] = (metadata.get("description", "") + f" [{form}, written by device_extras_check.py]").strip()
        out = dict(caches)
        out.update(rest)
        path = os.path.join(outdir, f"{stem}.{form}.safetensors")
        write_safetensors(path, out, meta)
        written[form] = path

    # The combined forms hold keys and values in one tensor: one head dim.
    if dk == dv and layout == "NHD":
        emit("kv_cache", {"kv_cache": [kdtype, [2] + kshape, kdata + vdata]}, None)
        emit("paged_nhd", {"paged_kv_cache": [kdtype, [blocks, 2, bs, heads, dk], interleave_pages(kdata, vdata, blocks)]},
             "NHD")
    elif dk == dv:
        emit("paged_hnd", {"paged_kv_cache": [kdtype, [blocks, 2, heads, bs, dk], interleave_pages(kdata, vdata, blocks)]},
             "HND")
    # vLLM classic: key [blocks, heads, dk/x, bs, x], value [blocks, heads, dv, bs], x = 16 / element bytes.
    x = max(1, 16 // esize)
    if dk % x == 0:
        if layout == "NHD":
            key = permute(kdata, [blocks, bs, heads, dk // x, x], esize, [0, 2, 3, 1, 4])
            value = permute(vdata, [blocks, bs, heads, dv], esize, [0, 2, 3, 1])
        else:
            key = permute(kdata, [blocks, heads, bs, dk // x, x], esize, [0, 1, 3, 2, 4])
            value = permute(vdata, [blocks, heads, bs, dv], esize, [0, 1, 3, 2])
        # kv_layout absent (NHD source) and explicit (HND source): both are how the form is recognised.
        emit("classic", {"key_cache": [kdtype, [blocks, heads, dk // x, bs, x], key],
                         "value_cache": [vdtype, [blocks, heads, dv, bs], value]},
             None if layout == "NHD" else "vllm-classic")
    return written


def case_size(path):
    """What reduce shrinks, read from the file: sequences, query tokens, heads, context tokens, pages."""
    tensors, _ = read_safetensors(path)
    query = tensors["query"][1]
    if "seq_lens" in tensors:
        lens = ints(tensors["seq_lens"])
    else:
        indptr, last = ints(tensors["kv_indptr"]), ints(tensors["kv_last_page_len"])
        key = tensors["key_cache"][1]
        bs = key[1] if len(key) == 4 else key[2]
        lens = [(indptr[s + 1] - indptr[s] - 1) * bs + last[s] for s in range(len(indptr) - 1)]
    for name in ("key_cache", "kv_cache", "paged_kv_cache"):
        if name in tensors:
            shape = tensors[name][1]
            pages = shape[1] if name == "kv_cache" else shape[0]
    return {"seqs": len(lens), "tokens": query[0], "q_heads": query[1], "context": sum(lens), "pages": pages}


# ---------------------------------------------------------------- reduce ---

def failure_kind(row):
    """The kind of a failing row's first failure, as app/reduce.cpp names it (written here again, from the JSON)."""
    if row["status"] == "error":
        return "error"
    r = row["reason"]

    def nan(kind, stats):
        return kind + (" NaN/Inf" if stats and stats.get("nonfinite") else " beyond tolerance")

    if r.startswith("output:"):
        return nan("output", {"nonfinite": row.get("nonfinite")})
    if r.startswith("LSE:"):
        return nan("LSE", row.get("lse"))
    if r.startswith("differs from the recorded output"):
        return nan("recorded output", row.get("recorded"))
    if r.startswith("differs from the recorded LSE"):
        return nan("recorded LSE", (row.get("recorded") or {}).get("lse"))
    for word, kind in (("returned ", "output size"), ("unwritten", "unwritten"), ("repeatable", "repeatability"),
                       ("graph", "graph replay")):
        if word in r:
            return kind
    return "check: " + r.split(":")[0]


def reduce_one(out, label, case, path, extra, expect_kind=None):
    """Reduces `case` on `path`: the input fails, reduce writes a smaller case
    whose metadata names the failure, and its printed replay command exits 1
    failing the same way. One PASS/FAIL line."""
    props = Props(f"reduce {label}")
    before_json = f"{out}/{label}.before.json"
    r = pc("replay", case, "--paths", path, *extra, "--no-timing", "--json", before_json)
    before = load_json(before_json)
    if not props.check(r.returncode == 1 and before is not None, f"the input fails on {path} (exit 1)",
                       f"exit {r.returncode}"):
        return props.done("")
    row = path_rows(before)[(before["cases"][0]["name"], path)]
    kind = failure_kind(row)
    print(f"  [{props.label}] input: {row['status']}: {row['reason'][:300]}; kind: {kind}")
    if expect_kind:
        props.check(kind == expect_kind, f"the input's failure is '{expect_kind}'", f"got '{kind}'")
    reduced = f"{out}/{label}.reduced.safetensors"
    r = pc("reduce", case, "--paths", path, *extra, "-o", reduced, timeout=400)
    if not props.check(r.returncode == 0 and os.path.exists(reduced), "reduce exits 0 and writes the case",
                       f"exit {r.returncode}"):
        return props.done("")
    replay = [line[len("replay: "):] for line in r.stdout.splitlines() if line.startswith("replay: ")]
    if not props.check(len(replay) == 1, "reduce prints one replay command"):
        return props.done("")
    small, big = case_size(reduced), case_size(case)
    shrink = ", ".join(f"{k} {big[k]}->{small[k]}" for k in big)
    props.check(all(small[k] <= big[k] for k in big) and any(small[k] < big[k] for k in big), "smaller", shrink)
    _, metadata = read_safetensors(reduced)
    props.check(metadata.get("reduced_failure") == f"{path}: {kind}", f"reduced_failure names '{path}: {kind}'",
                f"got {metadata.get('reduced_failure')!r}")
    after_json = f"{out}/{label}.after.json"
    r = run(replay[0] + " --json " + shlex.quote(after_json), shell=True)
    after = load_json(after_json)
    if not props.check(r.returncode == 1 and after is not None, "its replay command exits 1", f"exit {r.returncode}"):
        return props.done("")
    arow = path_rows(after)[(after["cases"][0]["name"], path)]
    print(f"  [{props.label}] reduced: {arow['status']}: {arow['reason'][:300]}")
    props.check(arow["status"] == row["status"] and failure_kind(arow) == kind, "the replay fails the same way",
                f"got {arow['status']}, {failure_kind(arow)}; the input: {row['status']}, {kind}")
    props.done(f"{path}: {shrink}; replay exit 1, still {row['status']}: {kind}")


def cmd_reduce(args):
    out = args.outdir
    gen_common = ["--q-heads", "8", "--kv-heads", "2", "--block-size", "16", "--seed", "11"]
    decode_bf16 = f"{out}/decode_bf16.safetensors"
    decode_f32 = f"{out}/decode_f32.safetensors"
    mixed_bf16 = f"{out}/mixed_bf16.safetensors"
    recorded = f"{out}/recorded_bf16.safetensors"
    for file, opts in ((decode_bf16, ["--seqs", "6", "--head-dim", "128", "--seq-len-min", "5", "--seq-len-max", "60",
                                      "--mode", "decode", "--q-dtype", "BF16", "--kv-dtype", "BF16"]),
                       (decode_f32, ["--seqs", "4", "--head-dim", "64", "--seq-len-min", "100", "--seq-len-max", "700",
                                     "--mode", "decode", "--q-dtype", "F32", "--kv-dtype", "F32"]),
                       (mixed_bf16, ["--seqs", "4", "--head-dim", "128", "--seq-len-min", "50", "--seq-len-max", "200",
                                     "--mode", "mixed", "--q-len-min", "2", "--q-len-max", "40", "--q-dtype", "BF16",
                                     "--kv-dtype", "BF16"]),
                       # docs/cli.md's example: a BF16-rounded recorded output judged with zero tolerance.
                       (recorded, ["--seqs", "4", "--seq-len", "40", "--mode", "prefill", "--with-output",
                                   "--output-dtype", "BF16"])):
        r = pc("gen", "-o", file, *gen_common, *opts)
        if not check(r.returncode == 0, f"reduce: gen {os.path.basename(file)}", f"exit {r.returncode}"):
            return
    exact = ["--atol", "0", "--rtol", "0"]
    # The recorded-output failure: only the reference can fail on it (GPU
    # paths are judged against the reference), so this one is CPU work.
    guarded("reduce recorded-reference", reduce_one, out, "recorded-reference", recorded, "reference", exact,
            "recorded output beyond tolerance")
    if CPU:
        say("SKIP", "reduce on GPU paths (ext:simple_decode_stale_key, ext:simple_decode_no_lse, split, prefill): no GPU")
        return
    if not check(args.kernel and os.path.exists(args.kernel), f"reduce: the faulty kernel library exists ({args.kernel})"):
        return
    kernel = ["--kernel", args.kernel]
    jobs = [("ext-stale-key", decode_bf16, "ext:simple_decode_stale_key", kernel, "output beyond tolerance"),
            ("ext-no-lse", decode_bf16, "ext:simple_decode_no_lse", kernel, None),
            # Built-in paths made to fail: their float32 arithmetic against the
            # float64 reference at zero tolerance (a real difference, nothing
            # planted); split exercises the context cuts of a decode path,
            # prefill those of a mixed batch.
            ("split-exact", decode_f32, "split", exact, "output beyond tolerance"),
            ("prefill-exact", mixed_bf16, "prefill", exact, None)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for f in [pool.submit(guarded, f"reduce {job[0]}", reduce_one, out, *job) for job in jobs]:
            f.result()


# ---------------------------------------------------------------- shards ---

def cmd_shards(args):
    out = args.outdir
    paths = "reference" if CPU else "reference,direct,split,auto,prefill,fmha"
    common = ["run", "--paths", paths, "--no-timing", "-q"]
    variants = {"plain": [], "workers2": ["--workers", "2"], "shard0": ["--shard", "0/2"], "shard1": ["--shard", "1/2"],
                "device_all": ["--device", "all"]}
    # All at once: one GPU and 16 cores have room, and the statuses must not
    # depend on what else runs.
    results = run_parallel([(common + extra + ["--json", f"{out}/{name}.json"], None) for name, extra in variants.items()])
    runs = {name: (r.returncode, load_json(f"{out}/{name}.json")) for name, r in zip(variants, results)}
    r = pc("merge", f"{out}/shard1.json", f"{out}/shard0.json", "-q", "--json", f"{out}/merged.json")
    runs["merged"] = (r.returncode, load_json(f"{out}/merged.json"))

    rc, plain = runs["plain"]
    if not check(plain is not None and rc == plain["exit_code"], f"shards: the plain run wrote its report (exit {rc})"):
        return
    print(f"  plain: {plain['summary']}")
    gpu_ran = sum(1 for p in path_rows(plain).values() if p["path"] != "reference" and p["status"] == "pass")
    if not CPU:
        check(plain["device"] is not None and gpu_ran > 0, f"shards: GPU paths ran in the plain run ({gpu_ran} passed)")
    want = {k: v["status"] for k, v in path_rows(plain).items()}
    for name in ("workers2", "merged", "device_all"):
        rc2, rep = runs[name]
        if name == "device_all" and CPU:
            check(rc2 == 4, "shards: --device all without a GPU exits 4", f"exit {rc2}")
            say("SKIP", "shards: --device all with a GPU: no GPU")
            continue
        props = Props(f"shards: {name}")
        if not props.check(rep is not None, "wrote its report", f"exit {rc2}"):
            props.done("")
            continue
        got = {k: v["status"] for k, v in path_rows(rep).items()}
        diff = [f"{k}: {want.get(k)} vs {got.get(k)}" for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
        props.check(rep["summary"]["cases"] == plain["summary"]["cases"], "the plain run's case count",
                    f"{rep['summary']['cases']} vs {plain['summary']['cases']}")
        props.check(rc2 == rc and rep["exit_code"] == plain["exit_code"], "the plain run's exit code",
                    f"exit {rc2}, JSON {rep['exit_code']} vs {rc}")
        props.check(not diff, "the plain run's status for every case and path",
                    "; ".join(diff[:5]) + (f" ... {len(diff)} in all" if len(diff) > 5 else ""))
        props.check([c["name"] for c in rep["cases"]] == [c["name"] for c in plain["cases"]], "the plain run's order")
        if not CPU:
            props.check(rep["device"] is not None, "the report names the device")
        props.done(f"{rep['summary']['cases']} cases, exit {rc2}, every status as the plain run's "
                   f"({rep['summary']['pass']} pass, {rep['summary']['n/a']} n/a)")
    for name in ("shard0", "shard1"):
        rc2, rep = runs[name]
        check(rep is not None and rep.get("shard", {}) and rep["shard"]["count"] == 2,
              f"shards: {name} says which shard it is", f"exit {rc2}")
    # A lost leg is refused (exit 3), so CI cannot pass on part of the cases.
    r = pc("merge", f"{out}/shard0.json", "-q")
    check(r.returncode == 3 and "missing 1" in r.stderr, "shards: merge of shard 0 alone refuses (exit 3, 'missing 1')",
          f"exit {r.returncode}")


# ----------------------------------------------------------------- forms ---

FORM_LINE = {"kv_cache": "given as kv_cache (vLLM); viewed in place as NHD",
             "paged_nhd": "given as paged_kv_cache (FlashInfer); copied at read time into NHD",
             "paged_hnd": "given as paged_kv_cache (FlashInfer); copied at read time into HND",
             "classic": "given as key_cache + value_cache (vLLM classic); copied at read time into HND"}


def cmd_forms(args):
    out = args.outdir
    gpu_paths = ["direct", "split", "auto", "prefill", "fmha"]
    paths = "reference" if CPU else "reference," + ",".join(gpu_paths)
    # BF16, d128 (so fmha takes them), GQA 8/2, block 16, ragged lengths over
    # page edges; a decode and a mixed batch (decode sequences next to chunks)
    # in NHD with a dense table and in HND with a CSR table; the reference's
    # output recorded (so the recorded comparison runs on every form too).
    base = ["--q-heads", "8", "--kv-heads", "2", "--head-dim", "128", "--block-size", "16", "--q-dtype", "BF16",
            "--kv-dtype", "BF16", "--seq-len-min", "1", "--seq-len-max", "300", "--seed", "5", "--with-output"]
    sources = {"decode_nhd": ["--seqs", "5", "--mode", "decode", "--layout", "NHD", "--table", "dense"],
               "decode_hnd": ["--seqs", "5", "--mode", "decode", "--layout", "HND", "--table", "csr"],
               "mixed_nhd": ["--seqs", "4", "--mode", "mixed", "--q-len-min", "2", "--q-len-max", "33", "--layout",
                             "NHD", "--table", "dense"],
               "mixed_hnd": ["--seqs", "4", "--mode", "mixed", "--q-len-min", "2", "--q-len-max", "33", "--layout",
                             "HND", "--table", "csr"]}
    files = {}
    for name, opts in sources.items():
        src = f"{out}/{name}.safetensors"
        r = pc("gen", "-o", src, *base, *opts)
        if not check(r.returncode == 0, f"forms: gen {name}", f"exit {r.returncode}"):
            return
        files[name] = ("separate", src, name)
        for form, file in make_forms(src, out).items():
            files[f"{name}.{form}"] = (form, file, name)
    expected = {"decode": {"direct", "split", "auto", "prefill", "fmha"}, "mixed": {"prefill", "fmha"}}
    reports = {}
    # The separate files first: the combined forms are compared with them.
    for label, (form, file, source) in files.items():
        props = Props(f"forms: {label}")
        if form != "separate":
            r = pc("inspect", file)
            props.check(r.returncode == 0 and FORM_LINE[form] in r.stdout, f"inspect says '{FORM_LINE[form]}'",
                        f"exit {r.returncode}")
        r = pc("replay", file, "--paths", paths, "--no-timing", "--json", f"{out}/{label}.json")
        rep = load_json(f"{out}/{label}.json")
        reports[label] = rep
        if not props.check(r.returncode == 0 and rep is not None, "replay exits 0", f"exit {r.returncode}"):
            props.done("")
            continue
        rows = {p["path"]: p for p in rep["cases"][0]["paths"]}
        ref = rows.get("reference", {})
        props.check(ref.get("status") == "pass" and ref.get("recorded") is not None,
                    "the reference passes against the recorded output", ref.get("reason", ""))
        if CPU:
            props.done("reference = recorded output" + ("" if form == "separate" else ", inspect names the form"))
            continue
        statuses = {p: rows[p]["status"] if p in rows else "missing" for p in gpu_paths}
        bad = {p: f"{st}: {rows[p]['reason'][:160]}" if p in rows else st for p, st in statuses.items()
               if st not in ("pass", "n/a")}
        props.check(not bad, "every GPU path pass or n/a", "; ".join(f"{p} {v}" for p, v in bad.items()))
        want = expected[source.split("_")[0]]
        props.check(all(statuses[p] == "pass" for p in want), f"{', '.join(sorted(want))} pass")
        # The same bytes in another form give the same answer: each path's
        # error equals that of the separate file of the same layout (kv_cache
        # and paged NHD read as NHD; paged HND, and classic of an HND source,
        # as HND; classic of an NHD source becomes HND, so it is not compared).
        same_layout = form in ("kv_cache", "paged_nhd", "paged_hnd") or (form == "classic" and source.endswith("hnd"))
        if same_layout and reports.get(source):
            a = {k[1]: v for k, v in path_rows(rep).items()}
            b = {k[1]: v for k, v in path_rows(reports[source]).items()}
            diff = [f"{p}: {v.get('max_abs_err')} vs {b.get(p, {}).get('max_abs_err')}" for p, v in a.items()
                    if v.get("max_abs_err") != b.get(p, {}).get("max_abs_err")]
            props.check(not diff, f"each path's max error equals {source}'s", "; ".join(diff))
        props.done(" ".join(f"{p} {st}" for p, st in statuses.items()) +
                   (f"; errors equal {source}'s" if same_layout else ""))
    if CPU:
        say("SKIP", "forms: GPU paths over the forms: no GPU")


# ------------------------------------------------------------------ html ---

BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell",
            "microsoft-edge", "firefox", "wkhtmltoimage", "cutycapt", "convert", "rsvg-convert", "inkscape"]


def screenshot(page, png):
    """Tries each headless renderer found; returns the one that wrote a PNG, or None."""
    url = "file://" + os.path.abspath(page)
    found = {b: shutil.which(b) for b in BROWSERS if shutil.which(b)}
    for pattern in ("/opt/google/chrome*/chrome", "/root/.cache/ms-playwright/*/chrome-linux/chrome",
                    os.path.expanduser("~/.cache/ms-playwright/*/chrome-linux/chrome"),
                    os.path.expanduser("~/.cache/ms-playwright/*/chrome-linux/headless_shell")):
        for hit in glob.glob(pattern):
            found.setdefault(os.path.basename(os.path.dirname(os.path.dirname(hit))), hit)
    modules = {}
    for module in ("playwright", "selenium", "weasyprint", "html2image", "pyppeteer"):
        r = run([sys.executable, "-c", f"import {module}; print(getattr({module}, '__version__', 'present'))"])
        if r.returncode == 0:
            modules[module] = r.stdout.strip()
    print(f"  renderers found: {found or 'none'}; Python modules: {modules or 'none'}", flush=True)
    say("INFO", f"html: renderers {sorted(found) or 'none'}, Python modules {sorted(modules) or 'none'}")
    attempts = []
    for name, exe in found.items():
        if "chrom" in name or "edge" in name or name == "headless_shell" or "ms-playwright" in exe:
            attempts.append((name, [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                    "--window-size=1400,2400", f"--screenshot={png}", url]))
        elif name == "firefox":
            attempts.append((name, [exe, "--headless", "--window-size=1400,2400", "--screenshot", png, url]))
        elif name == "wkhtmltoimage":
            attempts.append((name, [exe, "--quiet", "--width", "1400", page, png]))
        elif name == "cutycapt":
            attempts.append((name, [exe, f"--url={url}", f"--out={png}"]))
    if "playwright" in modules:
        code = ("import sys\nfrom playwright.sync_api import sync_playwright\nwith sync_playwright() as p:\n"
                " b = p.chromium.launch()\n pg = b.new_page(viewport={'width': 1400, 'height': 1000})\n"
                f" pg.goto({url!r})\n pg.screenshot(path={png!r}, full_page=True)\n b.close()\n")
        attempts.append(("playwright", [sys.executable, "-c", code]))
    if "selenium" in modules:
        code = ("from selenium import webdriver\no = webdriver.ChromeOptions()\n"
                "for a in ('--headless=new', '--no-sandbox', '--window-size=1400,2400'): o.add_argument(a)\n"
                f"d = webdriver.Chrome(options=o)\nd.get({url!r})\nd.save_screenshot({png!r})\nd.quit()\n")
        attempts.append(("selenium", [sys.executable, "-c", code]))
    if "html2image" in modules:
        code = ("from html2image import Html2Image\nimport os\n"
                f"h = Html2Image(output_path={os.path.dirname(os.path.abspath(png))!r}, size=(1400, 2400))\n"
                f"h.screenshot(url={url!r}, save_as={os.path.basename(png)!r})\n")
        attempts.append(("html2image", [sys.executable, "-c", code]))
    for name, cmd in attempts:
        if os.path.exists(png):
            os.remove(png)
        r = run(cmd, timeout=45)
        if os.path.exists(png) and os.path.getsize(png) > 1000:
            with open(png, "rb") as f:
                if f.read(8) == b"\x89PNG\r\n\x1a\n":
                    return name
        print(f"  {name}: no PNG (exit {r.returncode})")
    return None


def cmd_html(args):
    out = args.outdir
    decode, prefill = f"{out}/decode.safetensors", f"{out}/prefill.safetensors"
    heads = ["--q-heads", "32", "--kv-heads", "8", "--head-dim", "128", "--block-size", "16", "--q-dtype", "BF16",
             "--kv-dtype", "BF16"]
    for file, opts in ((decode, ["--seqs", "8", "--seq-len", "2048", "--mode", "decode"]),
                       (prefill, ["--seqs", "2", "--seq-len", "512", "--mode", "prefill"])):
        r = pc("gen", "-o", file, *heads, *opts)
        if not check(r.returncode == 0, f"html: gen {os.path.basename(file)}", f"exit {r.returncode}"):
            return
    page = f"{out}/report.html"
    paths = "reference" if CPU else "reference,direct,split,auto,prefill,fmha"
    timing = ["--no-timing"] if CPU else ["--warmup", "2", "--repeats", "10"]
    r = pc("replay", decode, prefill, "--paths", paths, *timing, "--html", page, "--json", f"{out}/html.json")
    rep = load_json(f"{out}/html.json")
    if not check(r.returncode == 0 and os.path.exists(page), "html: the timed run exits 0 and writes the page",
                 f"exit {r.returncode}"):
        return
    with open(page, encoding="utf-8") as f:
        text = f.read()
    print(f"  {page}: {len(text)} characters")
    check(text.lstrip().lower().startswith("<!doctype html") and text.rstrip().endswith("</html>"),
          "html: a whole page (doctype to </html>)")
    check("<script" not in text.lower() and "http://" not in text.replace("http://www.w3.org/", ""),
          "html: self-contained (no scripts, no links out)")
    for case in rep["cases"]:
        check(f">{case['name']}<" in text or f"{case['name']} " in text, f"html: the page has case {case['name']}")
    if CPU:
        check('id="no-roofline"' in text, "html: without GPU timings the page says there is no roofline")
        say("SKIP", "html: roofline points of GPU paths: no GPU")
    else:
        rows = path_rows(rep).values()
        gpu_pass = sorted({p["path"] for p in rows if p["path"] != "reference" and p["status"] == "pass"})
        check(len(gpu_pass) == 5, f"html: every GPU path passed on some case ({', '.join(gpu_pass)})")
        # The page's points are the timed stages with a byte and FLOP model (report_html.cpp, roofline_points).
        timed = sum(1 for p in rows for t in p["timings"]
                    if (t.get("median_ms") or 0) > 0 and (t.get("bytes") or 0) > 0 and (t.get("flops") or 0) > 0)
        points = len(re.findall(r'<circle [^>]*fill-opacity="0.8"', text))
        check('id="no-roofline"' not in text and 'aria-label="roofline"' in text, "html: the page has a roofline plot")
        check(points > 0 and points == timed, f"html: one roofline point per timed stage with a byte/FLOP model "
              f"({points} points, {timed} such stages in the JSON)")
        for path in ("direct", "split", "prefill", "fmha"):
            check(f">{path}</text>" in text, f"html: the roofline's legend has {path}")
        check("Measured at start-up: read" in text and "(not measured: the ceilings" not in text,
              "html: the device's measured ceilings are on the page")
    name = screenshot(page, f"{out}/report.png")
    if name:
        say("PASS", f"html: screenshot {out}/report.png by {name} ({os.path.getsize(out + '/report.png')} bytes)")
    else:
        say("SKIP", "html: no headless renderer could take a screenshot (see the log for what exists)")


# -------------------------------------------------------------- memlimit ---

def cmd_memlimit(args):
    out = args.outdir
    paths = "reference" if CPU else "reference,direct"
    run_args = ["run", "--preset", "mqa", "--paths", paths, "--no-timing"]
    r = pc(*run_args, "--json", f"{out}/limit.json", env={"PAGECHECK_DEVICE_MEMORY_LIMIT": "1M"})
    limited = load_json(f"{out}/limit.json")
    if CPU:
        check(r.returncode == 0, "memlimit: with only the reference the cap changes nothing (exit 0)", f"exit {r.returncode}")
        say("SKIP", "memlimit: direct refused under PAGECHECK_DEVICE_MEMORY_LIMIT=1M: no GPU")
    elif check(limited is not None, "memlimit: the capped run wrote its report", f"exit {r.returncode}"):
        rows = {p["path"]: p for p in limited["cases"][0]["paths"]}
        direct = rows.get("direct", {})
        print(f"  direct: {direct.get('status')}: {direct.get('reason')}")
        check(r.returncode == 4 and limited["exit_code"] == 4, "memlimit: PAGECHECK_DEVICE_MEMORY_LIMIT=1M exits 4",
              f"exit {r.returncode}")
        check(direct.get("status") == "error", "memlimit: direct is an error", direct.get("status"))
        reason = direct.get("reason", "")
        figures = re.findall(r"\d+\.\d (?:KiB|MiB|GiB|TiB)", reason)
        check("PAGECHECK_DEVICE_MEMORY_LIMIT allows 1.0 MiB" in reason and "of device memory" in reason
              and "free" in reason and len(figures) >= 3,
              "memlimit: its reason names the need, the cap and the free memory", reason)
        check(rows.get("reference", {}).get("status") == "pass", "memlimit: the reference still passes")
    r = pc(*run_args, "--json", f"{out}/nolimit.json")
    free = load_json(f"{out}/nolimit.json")
    ok = r.returncode == 0 and free is not None and all(p["status"] == "pass" for p in free["cases"][0]["paths"])
    check(ok, "memlimit: without the variable the same run passes (exit 0)", f"exit {r.returncode}")
    r = pc(*run_args, env={"PAGECHECK_DEVICE_MEMORY_LIMIT": "lots"})
    check(r.returncode == 2 and "PAGECHECK_DEVICE_MEMORY_LIMIT = 'lots' is not a size" in r.stderr,
          "memlimit: an unparsable value is a usage error (exit 2)", f"exit {r.returncode}")
    r = pc(*run_args, env={"PAGECHECK_DEVICE_MEMORY_LIMIT": "100G"})
    check(r.returncode == 0, "memlimit: a cap above the need changes nothing (100G: exit 0)", f"exit {r.returncode}")


def main():
    global PAGECHECK, CPU
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pagecheck", default="pagecheck")
    parser.add_argument("--cpu", action="store_true", help="a machine without a GPU: reference only")
    parser.add_argument("check", choices=["reduce", "shards", "forms", "html", "memlimit", "make-forms"])
    parser.add_argument("outdir")
    parser.add_argument("dest", nargs="?", help="make-forms: the folder to write into")
    parser.add_argument("--kernel", help="reduce: the faulty example library (libsimple_decode_faulty.so)")
    args = parser.parse_args()
    PAGECHECK, CPU = args.pagecheck, args.cpu
    if args.check == "make-forms":
        for form, file in make_forms(args.outdir, args.dest or ".").items():
            print(f"{form}: {file}")
        return 0
    os.makedirs(args.outdir, exist_ok=True)
    command = {"reduce": cmd_reduce, "shards": cmd_shards, "forms": cmd_forms, "html": cmd_html,
               "memlimit": cmd_memlimit}[args.check]
    guarded(args.check, command, args)
    failed = RESULTS.count("FAIL")
    print(f"{args.check}: {RESULTS.count('PASS')} passed, {failed} failed, {RESULTS.count('SKIP')} skipped")
    return 1 if failed or not RESULTS else 0


if __name__ == "__main__":
    sys.exit(main())
