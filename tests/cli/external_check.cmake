# External kernels through the real binary (docs/external-kernels.md), on any
# machine: without a GPU the ext: paths are skipped (with one they pass), a
# case a library does not take is n/a with its reason, bad libraries are
# refused naming the file, and a --save-failing bundle replays with the same
# --kernel. Run as:
#   cmake -DPAGECHECK=bin -DWRAP=libpagecheck_wrap.so -DSIMPLE=libsimple_decode.so
#         -DPLANNED=libplanned_decode.so -DABI10=libsimple_decode_abi1_0.so [-DFLASHINFER=libpagecheck_flashinfer.so]
#         -DMISMATCH=libpagecheck_ext_abi_mismatch.so -DNOSYMBOL=any.so -DWORK=dir -P external_check.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Runs pagecheck ARGN; fails unless it exits `expected`; the output in `out_var`.
function(pagecheck_expect expected out_var)
  execute_process(COMMAND "${PAGECHECK}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expected}")
    message(FATAL_ERROR "pagecheck ${ARGN}\nexited ${rc}, expected ${expected}:\n${out}${err}")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_contains text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected '${needle}' in:\n${text}")
  endif()
endfunction()

# status and reason of `path` in case 0 of the JSON report `file`.
function(path_row file path status_var reason_var)
  file(READ "${file}" json)
  string(JSON count LENGTH "${json}" cases 0 paths)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${json}" cases 0 paths ${i} path)
    if(name STREQUAL path)
      string(JSON status GET "${json}" cases 0 paths ${i} status)
      string(JSON reason GET "${json}" cases 0 paths ${i} reason)
      set(${status_var} "${status}" PARENT_SCOPE)
      set(${reason_var} "${reason}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${file}: no row for path ${path}:\n${json}")
endfunction()

# A decode case the wrap takes: skipped without a GPU ("no CUDA device"), pass with one.
pagecheck_expect(0 out run --kernel "${WRAP}" --paths reference,ext:pagecheck_direct,ext:pagecheck_split --seqs 2
                 --seq-len 40 --no-timing --no-color --json "${WORK}/decode.json")
foreach(path ext:pagecheck_direct ext:pagecheck_split)
  path_row("${WORK}/decode.json" ${path} status reason)
  if(NOT (status STREQUAL "pass" OR (status STREQUAL "skipped" AND reason MATCHES "no CUDA device")))
    message(FATAL_ERROR "decode case: ${path} is '${status}' (${reason}), expected skipped (no CUDA device) or pass")
  endif()
endforeach()
path_row("${WORK}/decode.json" reference status reason)
if(NOT status STREQUAL "pass")
  message(FATAL_ERROR "decode case: the reference is '${status}' (${reason})")
endif()

# ABI 1.1's plan step and an ABI 1.0 library load side by side: skipped
# without a GPU, pass with one; a case the baked entry does not take is n/a
# with its reason.
pagecheck_expect(0 out run --kernel "${PLANNED}" --kernel "${ABI10}"
                 --paths reference,ext:planned_decode,ext:simple_decode_abi1_0 --seqs 3 --seq-len 40 --no-timing
                 --no-color --json "${WORK}/planned.json")
foreach(path ext:planned_decode ext:simple_decode_abi1_0)
  path_row("${WORK}/planned.json" ${path} status reason)
  if(NOT (status STREQUAL "pass" OR (status STREQUAL "skipped" AND reason MATCHES "no CUDA device")))
    message(FATAL_ERROR "planned case: ${path} is '${status}' (${reason}), expected skipped (no CUDA device) or pass")
  endif()
endforeach()
pagecheck_expect(0 out run --kernel "${PLANNED}" --paths reference,ext:planned_decode_baked --seqs 65 --seq-len 8
                 --no-timing --no-color --json "${WORK}/baked.json")
path_row("${WORK}/baked.json" ext:planned_decode_baked status reason)
if(NOT status STREQUAL "n/a")
  message(FATAL_ERROR "65 sequences: ext:planned_decode_baked is '${status}' (${reason}), expected n/a")
endif()
expect_contains("${reason}" "at most 64 sequences" "baked entry reason")

# A prefill case: n/a with the library's own reason, GPU or not.
pagecheck_expect(0 out run --kernel "${WRAP}" --paths reference,ext:pagecheck_direct --mode prefill --seqs 2
                 --seq-len 20 --no-timing --no-color --json "${WORK}/prefill.json")
path_row("${WORK}/prefill.json" ext:pagecheck_direct status reason)
if(NOT status STREQUAL "n/a")
  message(FATAL_ERROR "prefill case: ext:pagecheck_direct is '${status}' (${reason}), expected n/a")
endif()
expect_contains("${reason}" "pagecheck_wrap: decode only" "prefill case reason")

# A declared capability (simple_decode takes NHD only), and --kernel twice.
pagecheck_expect(0 out run --kernel "${SIMPLE}" --kernel "${WRAP}" --paths ext:simple_decode,ext:pagecheck_direct
                 --layout HND --seqs 2 --seq-len 20 --no-timing --no-color --json "${WORK}/hnd.json")
path_row("${WORK}/hnd.json" ext:simple_decode status reason)
if(NOT status STREQUAL "n/a")
  message(FATAL_ERROR "HND case: ext:simple_decode is '${status}' (${reason}), expected n/a")
endif()
expect_contains("${reason}" "layout HND is not taken" "HND case reason")

# Two builds of one library (issue 22): the same entry names, told apart by
# the prefixes; without them, refused with the advice.
pagecheck_expect(0 out run --kernel "old=${SIMPLE}" --kernel "new=${SIMPLE}"
                 --paths reference,old:simple_decode,new:simple_decode --seqs 2 --seq-len 20 --no-timing --no-color
                 --json "${WORK}/prefixed.json")
path_row("${WORK}/prefixed.json" old:simple_decode status reason)
path_row("${WORK}/prefixed.json" new:simple_decode status reason)
file(COPY "${SIMPLE}" DESTINATION "${WORK}/second-build")
get_filename_component(simple_file "${SIMPLE}" NAME)
pagecheck_expect(2 out run --kernel "${SIMPLE}" --kernel "${WORK}/second-build/${simple_file}" --seqs 1 --seq-len 8)
expect_contains("${out}" "path ext:simple_decode is exported by both" "two builds without prefixes")
expect_contains("${out}" "--kernel old=" "two builds without prefixes: the advice")
pagecheck_expect(2 out run --kernel "${SIMPLE}" --kernel "${SIMPLE}" --seqs 1 --seq-len 8)
expect_contains("${out}" "is given twice" "one library given twice")
pagecheck_expect(2 out run --kernel "a=${SIMPLE}" --kernel "a=${SIMPLE}" --kernel "${WRAP}" --seqs 1 --seq-len 8)
expect_contains("${out}" "is given twice" "one library given twice with one prefix")

# Without --paths the library's entries run with every built-in path.
pagecheck_expect(0 out run --kernel "${WRAP}" --seqs 1 --seq-len 8 --no-timing --no-color --json "${WORK}/all.json")
path_row("${WORK}/all.json" ext:pagecheck_split status reason)

# Usage and loading errors name what is at fault.
pagecheck_expect(2 out run --kernel "${WRAP}" --paths ext:no_such_kernel --seqs 1 --seq-len 8)
expect_contains("${out}" "ext:pagecheck_direct" "unknown ext path")
pagecheck_expect(2 out run --paths ext:pagecheck_direct --seqs 1 --seq-len 8)
expect_contains("${out}" "no --kernel given" "ext path without --kernel")
pagecheck_expect(3 out run --kernel "${WORK}/missing.so" --seqs 1 --seq-len 8)
expect_contains("${out}" "missing.so" "missing library")
pagecheck_expect(3 out run --kernel "${NOSYMBOL}" --seqs 1 --seq-len 8)
expect_contains("${out}" "does not export pagecheck_kernels_v1" "library without the symbol")
pagecheck_expect(3 out run --kernel "${MISMATCH}" --seqs 1 --seq-len 8)
expect_contains("${out}" "ABI 2.0" "another ABI major")
expect_contains("${out}" "abi_mismatch" "another ABI major names the library")

# A failing case's bundle replays with the same library (absolute path). The
# reference fails here without a GPU: a BF16 recorded output judged with
# atol = rtol = 0 against the float64 reference.
pagecheck_expect(0 out gen -o "${WORK}/rec.safetensors" --seqs 2 --seq-len 24 --with-output --output-dtype BF16)
pagecheck_expect(1 out replay "${WORK}/rec.safetensors" --kernel "${WRAP}" --paths reference,ext:pagecheck_direct
                 --atol 0 --rtol 0 --no-timing --no-color --save-failing "${WORK}/bundles")
file(READ "${WORK}/bundles/rec/command.txt" command)
get_filename_component(wrap_abs "${WRAP}" ABSOLUTE)
expect_contains("${command}" "--kernel ${wrap_abs}" "bundle command.txt")
expect_contains("${command}" "ext:pagecheck_direct" "bundle command.txt")
execute_process(COMMAND sh "${WORK}/bundles/rec/replay.sh" RESULT_VARIABLE rc OUTPUT_VARIABLE replay_out ERROR_VARIABLE replay_err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "the bundle's replay.sh exited ${rc}, expected 1 (the same failure):\n${replay_out}${replay_err}")
endif()

# The FlashInfer adapter, when it was built (-DFLASHINFER=lib): loads without
# a GPU, takes the cases FlashInfer takes and names what it refuses.
if(FLASHINFER)
  pagecheck_expect(0 out run --kernel "${FLASHINFER}" --paths reference,ext:flashinfer_decode,ext:flashinfer_prefill
                   --seqs 3 --seq-len 40 --q-heads 8 --kv-heads 2 --q-dtype BF16 --kv-dtype BF16 --no-timing
                   --no-color --json "${WORK}/fi_decode.json")
  foreach(path ext:flashinfer_decode ext:flashinfer_prefill)
    path_row("${WORK}/fi_decode.json" ${path} status reason)
    if(NOT (status STREQUAL "pass" OR (status STREQUAL "skipped" AND reason MATCHES "no CUDA device")))
      message(FATAL_ERROR "FlashInfer decode case: ${path} is '${status}' (${reason}), expected skipped or pass")
    endif()
  endforeach()
  # A chunked prefill: the decode entry declines, the prefill entry takes it.
  pagecheck_expect(0 out run --kernel "${FLASHINFER}" --paths reference,ext:flashinfer_decode,ext:flashinfer_prefill
                   --mode chunked --seqs 2 --seq-len 64 --q-len 5 --q-dtype F16 --kv-dtype F16 --no-timing --no-color
                   --json "${WORK}/fi_chunked.json")
  path_row("${WORK}/fi_chunked.json" ext:flashinfer_decode status reason)
  if(NOT status STREQUAL "n/a")
    message(FATAL_ERROR "FlashInfer chunked case: ext:flashinfer_decode is '${status}' (${reason}), expected n/a")
  endif()
  path_row("${WORK}/fi_chunked.json" ext:flashinfer_prefill status reason)
  if(NOT (status STREQUAL "pass" OR (status STREQUAL "skipped" AND reason MATCHES "no CUDA device")))
    message(FATAL_ERROR "FlashInfer chunked case: ext:flashinfer_prefill is '${status}' (${reason})")
  endif()
  # Refusals, each with its reason: a head dim not built, a GQA group the
  # decode does not dispatch.
  pagecheck_expect(0 out run --kernel "${FLASHINFER}" --paths reference,ext:flashinfer_prefill --head-dim 96 --seqs 1
                   --seq-len 8 --q-dtype BF16 --kv-dtype BF16 --no-timing --no-color --json "${WORK}/fi_d96.json")
  path_row("${WORK}/fi_d96.json" ext:flashinfer_prefill status reason)
  expect_contains("${status}: ${reason}" "n/a: head_dim 96/96 is not taken; takes: 64, 128, 256" "FlashInfer d96")
  pagecheck_expect(0 out run --kernel "${FLASHINFER}" --paths reference,ext:flashinfer_decode --q-heads 32 --kv-heads 2
                   --seqs 1 --seq-len 8 --q-dtype BF16 --kv-dtype BF16 --no-timing --no-color
                   --json "${WORK}/fi_group.json")
  path_row("${WORK}/fi_group.json" ext:flashinfer_decode status reason)
  expect_contains("${status}: ${reason}" "n/a: flashinfer_decode: GQA group 16 is not dispatched" "FlashInfer group 16")
  # An FP8 cache: the decode takes it, the prefill entry is built without.
  pagecheck_expect(0 out run --kernel "${FLASHINFER}" --paths reference,ext:flashinfer_decode,ext:flashinfer_prefill
                   --kv-dtype F8_E4M3 --q-dtype BF16 --seqs 1 --seq-len 8 --no-timing --no-color
                   --json "${WORK}/fi_fp8.json")
  path_row("${WORK}/fi_fp8.json" ext:flashinfer_decode status reason)
  if(NOT (status STREQUAL "pass" OR (status STREQUAL "skipped" AND reason MATCHES "no CUDA device")))
    message(FATAL_ERROR "FlashInfer FP8 KV: ext:flashinfer_decode is '${status}' (${reason}), expected skipped or pass")
  endif()
  path_row("${WORK}/fi_fp8.json" ext:flashinfer_prefill status reason)
  expect_contains("${status}: ${reason}" "n/a: kv dtype F8_E4M3 is not taken" "FlashInfer FP8 KV, prefill")
endif()

message(STATUS "external kernels: CLI checks passed")
file(REMOVE_RECURSE "${WORK}")
