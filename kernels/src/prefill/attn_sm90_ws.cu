// attn_sm90_ws: the warp-specialised Hopper prefill / FMHA kernel (sm_90a).
//
//   attn_ws_kernel<WsTraits<KV, SRC>>
//       KV BF16 / F16 (wgmma operands as stored), head dim 128 or 64 for K
//       and V (WsTraits::DK; 64 for paged 16-bit caches; 256 for paged
//       16-bit caches with a query of their dtype: 64-key tiles, one Q
//       buffer), FP8 widened by the row producer (head dim 128).
//       SRC (KvSource): PagedTma (pages of 32..256 slots, powers of two:
//       whole tensor-copy boxes), PagedRows (any other page size: cp.async
//       rows), Contiguous (the gather's workspace, fmha). Every other case
//       runs attn_sm90.cu's kernel or the portable one (sm90_ws_supports and
//       sm90_ws_uses_tma say which; docs/gpu-paths.md has the table).
//
// Grid: persistent, one CTA per SM (384 threads, one CTA per SM). Work tiles
// are 128 query rows of one (sequence, KV head) (rows are (token, GQA head)
// pairs as in prefill_common.cuh), taken blockIdx.x, + gridDim.x, ...,
// heaviest first inside sections of pairs whose K/V fit in half of L2
// (decode_work). Producer and consumers decode the same sequence.
// - Producer warpgroup (warps 8-11, or 12-15 with three consumer
//   warpgroups; setmaxnreg 24 for tensor copies, 56 for rows). Per work
//   tile, its first warp copies Q by tensor copy into Q buffer
//   item % 2 (when the query is already in the operand type), once the
//   consumers released the work tile two before. K/V go in the order the
//   consumers take them: K_0, then K_j with V_{j-1}, then V_{n-1}.
//   Tensor copies: that warp alone; lane b reads the page of box b a tile
//   ahead, lane pairs issue the tile's boxes (64 dims x min(block, 128)
//   slots, 128-byte swizzle: the layout the wgmma descriptors read) on the
//   stage's full mbarrier with its byte count. A box not inside [key_lo,
//   seq_len) (the sequence's last page, a window's first) is copied row by
//   row with zero fill for keys outside [key_lo, key_hi), then fenced for
//   the async proxy. Rows: each of the 128 lanes owns one key of a tile and
//   computes its row's address; each warp copies its 32 rows with 16-byte
//   cp.async, 16 lanes to a row, the address passed by shuffle, arriving
//   with cp.async.mbarrier.arrive.
// - Two consumer warpgroups of 64 query rows (setmaxnreg 240 / 224; at
//   head dim 64 three where PAGECHECK_WS_D64_WGS=3, 192-row work tiles,
//   setmaxnreg 160 / 152), each:
//   S_j = Q K_j^T (wgmma SS) is issued before P_{j-1} V_{j-1} (wgmma RS),
//   both in flight together; the softmax of S_j runs while P_{j-1} V_{j-1}
//   is still on the tensor cores (FlashAttention-3's intra-warpgroup
//   overlap); O is rescaled once that GEMM is done.
// - Ping-pong: each warpgroup issues its GEMMs of an iteration only on its
//   turn (named barrier kTurnBar + wg, 256 threads: the warpgroup before it
//   in the round 0, 1(, 2) arrives on it once it has issued its own), so
//   one warpgroup's softmax runs under the others' GEMMs. The last
//   warpgroup arrives once at the start and warpgroup 0 syncs once at the
//   end, so every barrier balances.
// - Output: 16-bit outputs go through the work tile's Q buffer (each warp's
//   16 rows, swizzled as Q has them). Where the output has the query's shape
//   and the warp's rows are whole tokens' groups of heads (o_tma), lane 0
//   stores them by two tensor copies and the warp releases the Q buffer a
//   work tile later, once the copies have read it; otherwise they are read
//   back into registers, the buffer released, and they leave as whole
//   256-byte rows. Other output types are stored from the accumulators. The
//   next work tile's per-sequence loads are issued before this epilogue
//   (fetch_work) and used after it.
//
// Pipeline: kStages stages of K and kVStages of V (equal but for FP8-K
// under PAGECHECK_WS_FP8K_VSTAGES); barriers per stage k_full, v_full
// (tensor copies: one arrival with the transaction bytes; rows: one per
// producer lane), k_empty, v_empty (one arrival per consumer warp, 8); per
// Q buffer q_full, q_empty. Tiles are counted over all work of the CTA:
// stage count % kStages, phase parity (count / kStages) & 1.
//
// Every length and table entry is read from device memory; the grid and the
// tensor maps depend only on capacity fields, so captured launches replay
// after tables and lengths change.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#ifndef PAGECHECK_WS_SECTION_WAVES
#define PAGECHECK_WS_SECTION_WAVES 4  // sections also capped at four waves of work tiles (0: by L2 alone)
#endif
#ifndef PAGECHECK_WS_TRACE
#define PAGECHECK_WS_TRACE 0  // clock stamps off (the developer builds below set 1-5)
#endif
#if PAGECHECK_WS_TRACE
#include <cstdio>
#include <vector>
#endif

#include "prefill/attn_sm90.cuh"
#include "common/cuda_check.cuh"
#include "common/tensor_map.cuh"
#include "prefill/sm90_primitives.cuh"
#include "prefill/wgmma_tile.cuh"
#include "pagecheck/work_order.hpp"

// FP8 caches in the warp-specialised kernel widen to BF16 operands (0),
// to F16 for both GEMMs (1: Q rounded to F16 by the consumers), or to BF16
// for K and F16 for V (2); WsTraits::kF16K / kF16V. 0 and 1 were measured
// in session 12 (docs/performance.md); the others stay for A/B builds of
// the dev driver (scripts/build_prefill_dev.sh NAME -DPAGECHECK_WS_FP8_F16=N).
#ifndef PAGECHECK_WS_FP8_F16
#define PAGECHECK_WS_FP8_F16 2
#endif
// Head dim 64: every Nth n8 block of a row's exponentials on the FMA pipe
// (wgmma_tile.cuh, exp_row); 0 (the default): all on MUFU. Measured slower
// (H100, session 13: every 3rd block 307.7, every 4th 310.3 against 325.8
// TFLOP/s at 8 x 2048: the softmax is issue-bound, not MUFU-bound); kept
// as a developer knob for A/B builds (docs/performance.md).
// FP8 caches: a tile's raw bytes are staged in this many units (1, 2 or 4;
// a unit is 8 / N of the 8 row steps a lane takes, 16 / N KB a CTA), into
// 2N staging slots of one unit each, and a unit is widened when the 2N - 1
// after it are in flight. 1: one tile in flight while the one before is
// widened, the scheme measured in sessions 12-15. Nsight Compute (session
// 15) found the producer waiting one L2/DRAM latency a tile (the consumers
// on v_full): units give the same 32 KB of slots a longer lead (2N - 1 of
// 2N in flight). A/B builds of the dev driver (scripts/build_prefill_dev.sh
// NAME -DPAGECHECK_WS_FP8_UNITS=N).
#ifndef PAGECHECK_WS_FP8_UNITS
#define PAGECHECK_WS_FP8_UNITS 1
#endif
// FP8 caches: K kept in FP8 (1) or widened like V (0). With 1, S = Q K^T
// runs on FP8 wgmma (m64n128k32) over K as stored, copied by the row
// producer like a 128-byte row of 16-bit head dim 64 (no staging, no
// widening), with the query as two E4M3 parts (hi, lo = what hi lost) of
// each row scaled by a power of two (its largest element in [128, 256)),
// made by the consumers; V is staged and widened as before, one tile
// earlier (V_j right after K_j). Nsight Compute (session 15): the producer's
// staging and widening of K and V bound E4M3 prefill at ~0.7 of BF16; this
// halves both. The query's two parts carry ~2^-8 of each element (BF16:
// 2^-9). H100, session 17 (two rounds, E4M3, TFLOP/s): 395 / 496 / 185 /
// 495 against 350 / 389 / 229 / 390 at 8 x 2048 / 1 x 8192 / 16 x 512 /
// chunked: a win wherever a work tile has several key tiles to amortise the
// consumers' query split over, a loss at 512 keys. With the query by tensor
// copy (PAGECHECK_WS_FP8K_QTMA below, session 18) FP8-K wins at 512 keys
// too. Both kernels are built; sm90_ws_fp8_k below picks by the case's
// longest sequence and query type (PAGECHECK_WS_FP8_K_MIN_KEYS).
// PAGECHECK_WS_FP8_K=0 at build time leaves FP8-K out (the staged kernel
// for every FP8 case).
#ifndef PAGECHECK_WS_FP8_K
#define PAGECHECK_WS_FP8_K 1
#endif
// FP8-K's P V on FP8 wgmma too (1; an A/B knob, not yet run on a GPU):
// V kept as stored, transposed by the producer into key-contiguous rows
// (transpose_unit_fp8) instead of widened to F16, P in two E4M3 parts
// (pack_p_fp8 in wgmma_tile.cuh: one part misses the default tolerances,
// tests/test_reference.cpp); a V stage holds 16 KB instead of 32. Needs
// one staging unit (PAGECHECK_WS_FP8_UNITS=1). kernels/src/dev/
// wgmma_fp8_probe.cu checks the operand layouts on one tile; run it first.
#ifndef PAGECHECK_WS_FP8_PV
#define PAGECHECK_WS_FP8_PV 0
#endif
// FP8-K's query by the producer's tensor copy (1, the default; 0 for
// comparisons): a BF16 query's tile arrives a work tile ahead, as for the
// 16-bit kernels, and the consumers split it in shared memory instead of
// loading it from global memory at the work tile's start, the prologue that
// cost FP8-K its short sequences. H100, session 18 (`prefill_dev fp8`, two
// rounds, E4M3, TFLOP/s): 440-443 / 510-514 / 251-253 / 509-516 against
// 390-394 / 493-495 / 185 / 494-495 without it at 8 x 2048 / 1 x 8192 /
// 16 x 512 / chunked (16 x 512 with FP8-K forced on both; the staged
// kernel ran 228-229 there). Other query types are loaded as before.
#ifndef PAGECHECK_WS_FP8K_QTMA
#define PAGECHECK_WS_FP8K_QTMA 1
#endif
#ifndef PAGECHECK_WS_EXP_POLY
#define PAGECHECK_WS_EXP_POLY 0
#endif
// The next work tile's S_0 in the turn of this one's last P V (1: at every
// head dim; 2, the default: at head dim 64 only; 0: never): the tensor
// cores run it under this work tile's epilogue, which both consumer
// warpgroups reach at about the same time (the boundary that bounds
// 16 x 512: 2.5 key tiles a work tile). H100, session 18 (`prefill_dev
// quick` / `dims`, two rounds, TFLOP/s, prefill at block 16): head dim 128
// 507.6 / 591-593 / 277-278 against 516-517 / 597-598 / 294-295 at
// 8 x 2048 / 1 x 8192 / 16 x 512 (a loss everywhere, fmha too); head dim
// 64 (three warpgroups) 370.5-373.3 / 444-448 / 201.5-202.0 against 363.3
// / 450 / 195.5 (+2.4%, -1%, +3.3%). Session 19 tested two readings of
// head dim 128's loss and both were refuted: the wait for the output
// copies' read moved a turn later, and a third Q buffer (a work tile of
// lead for the next query's copy). Each was as slow as the early S_0 alone
// (16 x 512: 274-277 against base's 293), and the clock stamps put the
// loss in the key-tile phase before the last turn (+1300-1700 cycles a
// work tile; docs/performance.md, session 19).
// Taken where the next work tile's query is there by tensor copy and this
// one's output leaves by tensor copy with every row real (kEarlyS, and the
// run-time test before the last P V); the row sums and scales are made
// before that turn, so that nothing but the output's staging (no branch)
// runs while S_0 is in flight, then the wait, then the copies. Session 3's
// ws5 carried O, P and S across the work loop and lost 26%; here only S
// crosses the boundary, already retired.
#ifndef PAGECHECK_WS_EARLY_S
#define PAGECHECK_WS_EARLY_S 2
#endif
// Head dim 64's K/V stages (a tile is 16 KB there; 3 fit beside two Q
// buffers with room to spare). Two measured faster than three (H100,
// session 13, two interleaved rounds: 335.5 / 397.3 / 182.5 against
// 325.8 / 385.1 / 178.2 TFLOP/s at 8 x 2048 / 1 x 8192 / 16 x 512, block
// 16; equal at block 64): docs/performance.md.
// FP8-K's V stages (2, the default; 3 measured slower): a third V stage
// lets the producer stage and widen V a tile further ahead of the
// consumers (Nsight Compute, session 17: FP8-K's producer spends its
// most-stalled line waiting for a free stage). Fits beside two Q buffers:
// 64 + 32 (K) + 96 (V) + 32 (staging) KB. H100, session 19 (`prefill_dev
// fp8`, two rounds): E4M3 406.5 / 467.6-467.9 / 242.3-242.9 / 471-473
// TFLOP/s against 436.7-439.2 / 508 / 250 / 510 with two (8 x 2048 /
// 1 x 8192 / 16 x 512 / chunked): -7 to -8%.
#ifndef PAGECHECK_WS_FP8K_VSTAGES
#define PAGECHECK_WS_FP8K_VSTAGES 2
#endif
// Tried and removed (session 20, the code in 2dce714): the last key tile
// at half width where the mask leaves no key past its first 64 (S by
// m64n64, P V by four k-steps; half the diagonals at 16 x 512), each
// pipeline stage that may take it written out twice so that its branch
// joins with nothing in flight (with only the issue in a branch, ptxas
// serialised every wgmma, C7515). Fewer GEMMs, yet slower: H100, two
// rounds, 283.3-283.6 against 294.0-294.3 TFLOP/s at 16 x 512 (-3.6%),
// 504.8-506.8 against 513.4-513.8 at 8 x 2048. With the softmax and P of
// that tile at half width too, 16 x 512 ran 285.7-286.4.
#ifndef PAGECHECK_WS_D64_STAGES
#define PAGECHECK_WS_D64_STAGES 2
#endif
// Head dim 64's consumer warpgroups: 2 (128-row work tiles) or 3 (192-row
// work tiles, FlashAttention-3's shape at this head dim; 512 threads, the
// consumers at 160 registers). Nsight Compute (session 15) found head
// dim 64's consumers issuing in 40% of their schedulers' slots with the
// rest in dependent latency: a third warpgroup is a third warp a scheduler
// to fill them. H100, session 17 (two rounds, BF16, TFLOP/s): 365-367 /
// 453 / 196 against 335-336 / 398 / 183 at 8 x 2048 / 1 x 8192 / 16 x 512
// (block 16), 361 against 338 at block 64: kept.
#ifndef PAGECHECK_WS_D64_WGS
#define PAGECHECK_WS_D64_WGS 3
#endif
// Developer knobs for the instruction-fetch experiment (session 22; never
// in a product build): Nsight Compute put a third of the epilogue's stall
// samples on "no instruction" (FMHA, 16 x 512: 822 of 2534; 6.7% of all the
// kernel's samples), most where the consumers jump from the key-tile loop
// into the epilogue's first fragment, which sits past the softcap copy of
// that loop (about 4000 instructions, 64 KB, never run at the bench shapes)
// and is broken up by the cold output paths (float outputs, rows that do not
// fill a tensor copy). PAGECHECK_WS_LEAN_SOFTCAP=1 drops the softcap copy
// and PAGECHECK_WS_LEAN_EPI=1 the cold output paths, so that an A/B of
// `prefill_dev quick` (BF16 outputs, whole tiles, no softcap) times what
// the code layout costs. Such a build gives WRONG results wherever a case
// needs what it dropped (it runs the kept path instead): never check with
// it. (A trap in their place made ptxas serialise the wgmma, C7512/C7520.)
#ifndef PAGECHECK_WS_LEAN_SOFTCAP
#define PAGECHECK_WS_LEAN_SOFTCAP 0
#endif
#ifndef PAGECHECK_WS_LEAN_EPI
#define PAGECHECK_WS_LEAN_EPI 0
#endif
// The row sums, scales and LSEs without branches (1; 0, the default until
// measured): the profile of session 22 (FMHA, 16 x 512) put 368 of the
// 1006 samples of the epilogue's first two runs of code on "no
// instruction", at the loop's exit and at the targets of row_stats' jumps
// (over the sinks' code, around __fdividef's range checks).
// add_sink_row_flat and one rcp.approx instead.
#ifndef PAGECHECK_WS_FLAT_STATS
#define PAGECHECK_WS_FLAT_STATS 0
#endif
// The softcap's tanh by one ex2 and one rcp (tanh_ex2 in
// prefill_common.cuh; 1) or tanhf (0, the default until measured): the
// softcap copy of the key-tile loop is about 4000 instructions, over half
// of them tanhf, and it sits between the loop and the epilogue.
#ifndef PAGECHECK_WS_FAST_TANH
#define PAGECHECK_WS_FAST_TANH 0
#endif
// Softcap cases in a kernel of their own (1; 0, the default until
// measured): each instantiation then holds one copy of the key-tile loop,
// so the softcap copy no longer sits between the loop and the epilogue of
// the kernels the bench shapes run. Twice the kernels of this file, but
// not at head dim 64: with one copy of the loop there, ptxas serialised
// its wgmma (C7520, all eight kernels).
#ifndef PAGECHECK_WS_SOFTCAP_KERNEL
#define PAGECHECK_WS_SOFTCAP_KERNEL 0
#endif
// FP8 widening: staged chunks loaded ahead of their widening, this many at
// a time (widen_unit_fp8; 1, the default until measured).
#ifndef PAGECHECK_WS_FP8_WIDEN_BATCH
#define PAGECHECK_WS_FP8_WIDEN_BATCH 1
#endif

namespace pagecheck::gpu::attn {
bool sm90_ws_out_tma_enabled();
namespace {

// Where K/V tiles come from and how they are copied.
enum class KvSource {
  PagedTma,    // pages of 32+ slots (powers of two): whole boxes by tensor copy from one producer warp
  PagedRows,   // any page size: a key's row address per producer lane, 16-byte cp.async by 16 lanes a row
  Contiguous,  // the gather's workspace (fmha): one 128-row box per tile
};

template <KvKind KV_, KvSource SRC_, int DK_ = 128, bool FP8K_ = false>
struct WsTraits {
  // Head dim 128 (two 64-dim column halves of 128-byte swizzled rows) or 64
  // (one); K and V alike.
  static constexpr int DK = DK_;
  static constexpr int DV = DK_;
  static constexpr int kHalves = DK / 64;
  static constexpr int kPolyEvery = DK == 64 ? PAGECHECK_WS_EXP_POLY : 0;  // exp_row's split
  static constexpr KvKind KV = KV_;
  static constexpr KvSource SRC = SRC_;
  static constexpr bool CONTIG = SRC == KvSource::Contiguous;
  static constexpr bool kTma = SRC != KvSource::PagedRows;
  // FP8 caches: the row producer widens each key's 128 bytes on the way
  // (tensor copies cannot convert); k_scale and v_scale are in logit_mul
  // and out_scale as for every kernel.
  static constexpr bool kFp8 = KV == KvKind::E4M3 || KV == KvKind::E5M2;
  // Operand types of S = Q K^T (kF16K) and O += P V (kF16V): F16 for F16
  // caches, else BF16; FP8 caches as PAGECHECK_WS_FP8_F16 says. F16 holds
  // every E4M3/E5M2 value, and widening to it is one conversion a pair
  // against four to BF16 (through F16 and F32); F16 for K would make the
  // consumers round a BF16 query to F16 themselves (no tensor copy of Q,
  // nor of the output), which cost the short shapes more than the cheaper
  // widening gained (docs/performance.md, session 12).
  static constexpr bool kF16K = KV == KvKind::F16 || (kFp8 && PAGECHECK_WS_FP8_F16 == 1);
  static constexpr bool kF16V = KV == KvKind::F16 || (kFp8 && PAGECHECK_WS_FP8_F16 >= 1);
  // FP8 K as stored, S on FP8 wgmma (PAGECHECK_WS_FP8_K); the query in two
  // E4M3 parts made by the consumers (no tensor copy of Q or the output).
  static constexpr bool kFp8K = kFp8 && FP8K_;
  static constexpr bool kFp8PV = kFp8K && PAGECHECK_WS_FP8_PV;  // P V on FP8 wgmma, V^T as stored
  static constexpr int kElemBytes = kFp8 ? 1 : 2;  // of the cache
  // Consumer warpgroups: two (three at head dim 64 where PAGECHECK_WS_D64_WGS says).
  static constexpr int kWGs = DK == 64 ? PAGECHECK_WS_D64_WGS : 2;
  // Softcap cases in a kernel of their own (PAGECHECK_WS_SOFTCAP_KERNEL).
  static constexpr bool kOwnSoftcapKernel = PAGECHECK_WS_SOFTCAP_KERNEL && DK != 64;
  static constexpr int kConsumerWarps = 4 * kWGs;       // arrivals on the empty barriers
  static constexpr int kThreads = 128 * (kWGs + 1);     // consumer warpgroups + the producer warpgroup
  static constexpr int kBlockM = 64 * kWGs;             // query rows per work tile, 64 per consumer warpgroup
  // Keys per tile: 128; 64 at head dim 256, where a consumer's O is 128
  // floats a thread and S of 128 keys would not fit beside it.
  static constexpr int kBlockN = DK == 256 ? 64 : 128;
  // Q buffers: two (the next work tile's Q arrives during this one's tail);
  // one at head dim 256 (64 KB a buffer: two do not fit beside the K/V
  // stages), and no split query there (its lo rows take buffer 1).
  static constexpr int kQBuffers = DK == 256 ? 1 : 2;
  // The next work tile's S_0 under this one's epilogue (PAGECHECK_WS_EARLY_S):
  // 16-bit query by tensor copy into the other Q buffer.
  static constexpr bool kEarlyS =
      (PAGECHECK_WS_EARLY_S == 1 || (PAGECHECK_WS_EARLY_S == 2 && DK == 64)) && !kFp8K && kQBuffers == 2;
  static constexpr int kSFloats = kBlockN / 2;  // S a consumer thread holds: 64 (128 keys), 32 (64 keys)
  // Head dim 64's tiles are half the size: a third stage would fit, but
  // two ran faster (PAGECHECK_WS_D64_STAGES).
  static constexpr int kStages = DK == 64 ? PAGECHECK_WS_D64_STAGES : 2;
  // V's stages: as K's but for FP8-K (PAGECHECK_WS_FP8K_VSTAGES).
  static constexpr int kVStages = kFp8K ? PAGECHECK_WS_FP8K_VSTAGES : kStages;
  static constexpr int kChunks = DK / 8;           // 16-byte chunks of a row
  // The row producer's lanes a key row (16-byte chunks of the cache's row):
  // 16 at head dim 128 in 16 bits, 8 at 64 or for FP8 (128-byte rows).
  static constexpr int kLanesPerRow = DK * kElemBytes / 16;
  static constexpr int kQBytes = kBlockM * DK * 2;
  static constexpr int kTileBytes = kBlockN * DK * 2;  // one K or V tile (16-bit)
  static constexpr int kKTileBytes = kFp8K ? kBlockN * DK : kTileBytes;  // one K tile as the GEMM reads it
  static constexpr int kVTileBytes = kFp8PV ? kBlockN * DV : kTileBytes;  // one V tile as the GEMM reads it
  // k_full, v_full, k_empty, v_empty per stage; q_full, q_empty per Q buffer.
  static constexpr int kBarrierBytes = 2 * (kStages + kVStages) * 8 + 4 * 8;
  // The tensor-copy producer is one warp with nothing to hold; the row
  // producer keeps a key's page and row address.
  // The registers a thread is launched with (65536 a multiprocessor, in
  // steps of 8: 168 at 384 threads, 128 at 512); the consumers take what
  // the producer gives up, at most 240 (two consumer warpgroups: 240 / 224,
  // three: 160 / 152).
  static constexpr int kLaunchRegs = (65536 / kThreads) & ~7;
  // (Three consumer warpgroups: the row producer at 32, so that the
  // consumers get 160; at 56 they got 152 and ptxas serialised their wgmma.)
  static constexpr int kProducerRegs = kTma ? 24 : (kWGs == 3 ? 32 : 56);
  static constexpr int kConsumerRegsFit = ((kLaunchRegs * kThreads - kProducerRegs * 128) / (128 * kWGs)) & ~7;
  static constexpr int kConsumerRegs = kConsumerRegsFit < 240 ? kConsumerRegsFit : 240;
  // Full barriers: one arrival (lane 0, with the transaction bytes), or one
  // per producer lane as its row copies land.
  static constexpr int kFullArrivals = kTma ? 1 : 128;
  // +1024: the dynamic shared memory base is aligned up to the swizzle atom.
  // Two Q buffers: the producer copies the next work tile's Q while the
  // consumers finish the current one. A split query (loaded and split by
  // the consumers) keeps hi in the first and lo in the second.
  // kSumStore: each consumer thread stores its row sums to a word of
  // shared memory right before the wait for P V. Without that store ptxas
  // put the wait (WARPGROUP.DEPBAR) ahead of the softmax's exponentials,
  // which then no longer ran under P V; a shared-memory store cannot move
  // past the wait. Tensor-copy kernels only: the row producer's kernel is
  // bound by its copies, and the store cost it 1%.
  static constexpr bool kSumStore = kTma;
  static constexpr int kScratchBytes = kSumStore ? 128 * kWGs * 4 : 0;
  // FP8 caches: two raw tiles (128 keys x 128 bytes) of staging, in
  // 2 kFp8Units slots of one unit each, filled by cp.async kFp8Lag units
  // ahead of the widening (see stage_unit_fp8).
  static constexpr int kStagingBytes = kFp8 ? 2 * kBlockN * DK : 0;
  static constexpr int kFp8Units = PAGECHECK_WS_FP8_UNITS;
  static constexpr int kFp8Slots = 2 * kFp8Units;
  static constexpr int kFp8Lag = kFp8Slots - 1;
  static constexpr int kFp8UnitBytes = kStagingBytes / kFp8Slots;
  static_assert(kFp8Units == 1 || kFp8Units == 2 || kFp8Units == 4, "a tile's 8 row steps in 1, 2 or 4 units");
  // FP8-K: each query row's power of two (the inverse of its scale), for
  // the threads that hold the row's S.
  static constexpr int kRowScaleBytes = kFp8K ? kBlockM * 4 : 0;
  static constexpr int kSmemBytes = 1024 + kQBuffers * kQBytes + kStages * kKTileBytes + kVStages * kVTileBytes + kBarrierBytes +
                                    kScratchBytes + kStagingBytes + kRowScaleBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kWGs <= kLaunchRegs * kThreads,
                "setmaxnreg budgets exceed the registers the CTA is launched with");
  static_assert(kWGs == 2 || (kWGs == 3 && DK == 64), "two consumer warpgroups, or three at head dim 64");
  static_assert(kTma || kBlockN == 128 || (kBlockN == 64 && kLanesPerRow == 32),
                "the row producer's warps take 32 keys of a tile (16 at head dim 256)");
  static_assert(!kFp8 || !kTma, "FP8 caches take the row producer (it widens them)");
  static_assert(DK == 128 || DK == 64 || DK == 256, "head dims 64, 128 and 256");
  static_assert(DK != 256 || (!CONTIG && !kFp8), "head dim 256: 16-bit paged caches");
  static_assert(!kFp8 || DK == 128, "FP8 caches at head dim 128 only");
  static_assert(!kFp8K || (kQBytes == 2 * kBlockM * DK && kBlockN == 128), "FP8-K: Q's two E4M3 parts fill a Q buffer");
  static_assert(!kFp8PV || kFp8Units == 1, "FP8 P V: a warp transposes its 32 staged keys at once (one unit)");
  static_assert(!CONTIG || DK == 128, "the gather's workspace (fmha) is head dim 128");
};

// Clock stamps of the consumers' work tiles (a developer build:
// scripts/build_prefill_dev.sh NAME -DPAGECHECK_WS_TRACE=1, then
// `prefill_dev trace SEQS LEN BLOCK` with WS_TRACE=FILE; read by
// scripts/prefill_trace.py). Per work tile and consumer warpgroup: 0 the
// loop's start, 1 decoded, 2 Q in, 3 first turn, 4 S_0 done, 5 last turn,
// 6 last P V done, 7 output stored; 8 key tiles, 9 the work index. With
// -DPAGECHECK_WS_TRACE=2 also the steady key tiles' phases, summed over the
// work tile: 10 waiting for K and the turn, 11 issuing and S done, 12 the
// softmax, 13 waiting for P V, 14 rescale and P (clock reads in the loop:
// timings of such a build are not the kernel's).
#if PAGECHECK_WS_TRACE
constexpr int kTraceSlots = 16;
__device__ unsigned long long g_ws_trace[160 * 2 * 64 * kTraceSlots];
#define WS_TRACE_AT(slot, value)                                                            \
  do {                                                                                      \
    if (wg_thread == 0 && wg < 2 && item < 64 && blockIdx.x < 160)                          \
      g_ws_trace[((blockIdx.x * 2 + wg) * 64 + item) * kTraceSlots + (slot)] = (value);     \
  } while (0)
#define WS_TRACE(slot) WS_TRACE_AT(slot, clock64())
#else
#define WS_TRACE_AT(slot, value) \
  do {                           \
  } while (0)
#define WS_TRACE(slot) WS_TRACE_AT(slot, 0)
#endif
// A stamp taken only in trace mode `mode` (WS_TRACE itself is empty
// outside a trace build).
#define WS_TRACE_IN(mode, slot)                                  \
  do {                                                           \
    if constexpr (PAGECHECK_WS_TRACE == (mode)) WS_TRACE(slot);  \
  } while (0)
// -DPAGECHECK_WS_TRACE=3 instead splits the epilogue: 10 row sums, scales
// and LSEs done, 11 rows read back from shared memory, 12 fence and Q
// release done; 15 holds 3 (the mode, for scripts/prefill_trace.py).
#define WS_TRACE_EPI(slot) WS_TRACE_IN(3, slot)
// -DPAGECHECK_WS_TRACE=5 splits what comes before the last turn, where the
// early S_0 (PAGECHECK_WS_EARLY_S) adds its fixed cost (session 19: 1300-
// 1700 cycles a work tile at head dim 128): 10 a work tile that began with
// an early S_0 has its softmax, P and the previous output's release done;
// 11 the last steady key tile done; 12 the next work tile decoded and the
// early test made; 13 the row sums made; 14 the early S_0's query and K
// tile in (where it comes; then 14 to 5 is the last V tile's wait and the
// turn); 15 holds 5.
#define WS_TRACE_EARLY(slot) WS_TRACE_IN(5, slot)
// -DPAGECHECK_WS_TRACE=4: the steady key tiles of CTAs 0 and 1 one by one
// (a timeline: loop start, turn taken, S done, softmax done, P V done, P
// packed, absolute clocks per consumer warpgroup), written to
// FILE.timeline.prefill / .fmha and read by scripts/prefill_timeline.py:
// when each warpgroup's GEMMs and softmax run against the other's.
#if PAGECHECK_WS_TRACE == 2
#define WS_LOOP_MARK(t) const long long t = clock64()
#define WS_LOOP_ADD(i, from, to) loop_sum[i] += (to) - (from)
#elif PAGECHECK_WS_TRACE == 4
constexpr int kTimelineTiles = 1024;
__device__ unsigned long long g_ws_timeline[2 * 2 * kTimelineTiles * 6];
#define WS_LOOP_MARK(t) const long long t = clock64()
#define WS_LOOP_ADD(i, from, to)                                                                              \
  do {                                                                                                        \
    if (blockIdx.x < 2 && wg < 2 && wg_thread == 0 && timeline_n < kTimelineTiles) {                         \
      unsigned long long* e = &g_ws_timeline[((blockIdx.x * 2 + wg) * kTimelineTiles + timeline_n) * 6];     \
      e[i] = (from);                                                                                          \
      if ((i) == 4) e[5] = (to);                                                                              \
    }                                                                                                         \
    if ((i) == 4) ++timeline_n;                                                                               \
  } while (0)
#else
#define WS_LOOP_MARK(t) \
  do {                  \
  } while (0)
#define WS_LOOP_ADD(i, from, to) \
  do {                           \
  } while (0)
#endif

// Named barriers: 0 is __syncthreads; 1-3: consumer warpgroup wg's own Q
// load (kQBar + wg); 4-6: warpgroup wg's turn to issue GEMMs (kTurnBar + wg).
constexpr int kQBar = 1;
constexpr int kTurnBar = 4;

struct WsParams {
  CUtensorMap key_map;    // (dim, slot|head, head|slot, block) over the key cache (or the contiguous K)
  CUtensorMap value_map;  // same over V
  CUtensorMap query_map;  // (dim, q head, token) over the query, boxes of 64 dims x group heads x 128 / group tokens
  CUtensorMap out_map;    // the same over the output, boxes of 16 / group tokens (o_tma)
  AttnParams a;
  // Work index w's (sequence, KV head, query tile), heaviest first in
  // sections of pairs whose K/V fit in L2 (pagecheck/work_order.hpp).
  WorkOrder order;
  std::int32_t box_rows = 0;        // slots per tensor-copy box: min(block_size, 128), 128 contiguous
  std::int32_t boxes_per_tile = 0;  // kBlockN / box_rows
  std::int32_t head_inner = 0;      // the maps order (dim, head, slot, block): head stride < slot stride
  // The GQA group, for the epilogue's rows.
  FastDiv div_group;
  // The producer copies Q (query in the operand type, group divides 128, no
  // split query); otherwise the consumers load and convert it.
  std::int32_t q_tma = 0;
  // A consumer warp's 16 output rows leave by two tensor copies from the Q
  // buffer (16-bit output of the query's shape, q_tma, group divides 16),
  // whenever all 16 are rows of the sequence.
  std::int32_t o_tma = 0;
  // The row producer's strides in 16-byte units ([0] K, [1] V): a row start
  // is page * row_block + slot * row_slot + kv_head * row_head in 32 bits
  // (caches under 64 GiB, sm90_ws_supports).
  std::uint32_t row_block[2] = {0, 0}, row_slot[2] = {0, 0}, row_head[2] = {0, 0};
};

// One work tile: 128 query rows of one (sequence, KV head), the key range
// they see (prefill_common.cuh's QueryTile) and its key tiles. Producer
// and consumers decode the same sequence of these.
struct Work : QueryTile {
  int tile_first = 0, num_tiles = 0;
};

// Work index w's (sequence, KV head, query tile) by the launch's work order
// (pagecheck/work_order.hpp), and its sequence's values (loads issued, not
// waited for: finish_work uses them; false there when the tile holds no
// query row of its sequence).
struct WorkAhead {
  std::int64_t w = 0, seq = 0;
  int kv_head = 0, tile = 0;
  QueryTileLoads ld;
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ WorkAhead fetch_work(const WsParams& wp, std::int64_t w) {
  WorkAhead a;
  a.w = w;
  if (w >= wp.order.num_work) return a;
  const WorkTile t = work_tile(wp.order, w);
  a.seq = t.seq;
  a.kv_head = t.kv_head;
  a.tile = t.tile;
  a.ld = query_tile_loads(wp.a, t.seq);
  return a;
}

template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool finish_work(const WsParams& wp, const WorkAhead& a, Work& k) {
  if (!query_tile_from<kBlockM>(wp.a, a.seq, a.kv_head, a.tile, a.ld, k)) return false;
  k.tile_first = k.first_key_tile<kBlockN>();
  k.num_tiles = k.end_key_tile<kBlockN>() - k.tile_first;
  return true;
}

template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool decode_work(const WsParams& wp, std::int64_t w, Work& k) {
  return finish_work<kBlockM, kBlockN>(wp, fetch_work<kBlockM, kBlockN>(wp, w), k);
}

// ---- producer: tensor copies ------------------------------------------------------

// One K or V tile of key tile `kt` into `tile` (kBlockN rows x DK dims, DK / 64
// column halves of 128-byte swizzled rows): whole boxes by tensor copy,
// edge boxes row by row. A box is whole when its slots lie in [key_lo,
// seq_len): keys in [key_hi, seq_len) are real (finite) keys that S masks,
// while slots past seq_len may hold NaN (and P = 0 times NaN would poison O)
// and keys below a window's start may sit in pages a runtime has reused.
// Lane b holds the page of box b in `page`. Lane 0 arrives on `full` with
// the copied bytes.
template <class T, bool kValue>
__device__ __forceinline__ void produce_tile_tma(const WsParams& p, std::uint32_t tile, std::uint32_t full, int kt,
                                                 std::int32_t page, const Work& k, int lane) {
  const void* map = kValue ? static_cast<const void*>(&p.value_map) : static_cast<const void*>(&p.key_map);
  const int key0 = kt * T::kBlockN;
  const int box_rows = p.box_rows;
  const bool edge = key0 < k.key_lo || key0 + T::kBlockN > k.seq_len;
  std::uint32_t edge_boxes = 0;  // bit b: box b is copied row by row
  if (edge) {
    for (int b = 0; b < p.boxes_per_tile; ++b) {
      const int k0 = key0 + b * box_rows;
      if (k0 < k.key_lo || k0 + box_rows > k.seq_len) edge_boxes |= 1u << b;
    }
    const char* base = static_cast<const char*>(
        kValue ? (T::CONTIG ? p.a.contig_value : p.a.view.kv.value_data)
               : (T::CONTIG ? p.a.contig_key : p.a.view.kv.key_data));
    const CacheStrides& st = kValue ? p.a.view.kv.value_strides : p.a.view.kv.key_strides;
    for (int b = 0; b < p.boxes_per_tile; ++b) {
      if (!(edge_boxes & (1u << b))) continue;
      const std::int64_t box_page = __shfl_sync(0xffffffffu, page, b);
      // kChunks lanes take the chunks of one row (16 at head dim 128: lanes
      // 0-15 one row, 16-31 the next).
      for (int r = lane / T::kChunks; r < box_rows; r += 32 / T::kChunks) {
        const int row = b * box_rows + r, key = key0 + row, chunk = lane % T::kChunks;
        const bool valid = key >= k.key_lo && key < k.key_hi;
        std::int64_t offset;
        if constexpr (T::CONTIG)
          offset = ((k.seq * p.a.contig_capacity + key) * p.a.view.kv.kv_heads + k.kv_head) * T::DK;
        else
          offset = box_page * st.block + (key % p.a.view.kv.block_size) * st.slot + k.kv_head * st.head;
        cp_async16(tile + sw128<T::kBlockN>(row, chunk), valid ? base + (offset + chunk * 8) * 2 : base, valid);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncwarp();
  }
  const int whole = p.boxes_per_tile - __popc(edge_boxes);
  if (lane == 0) mbar_arrive_expect_tx(full, static_cast<std::uint32_t>(whole * box_rows * T::DK * 2));
  // Lane 2 b + h copies column half h of box b (head dim 64: lane b, box b):
  // up to 16 boxes (pages of 8 slots) in one instruction; one lane issuing
  // them in turn held block 16 at 221 TFLOP/s (8 x 2048) against 460 for
  // block 64.
  const int b = lane / T::kHalves, half = lane % T::kHalves;
  const std::int32_t box_page = __shfl_sync(0xffffffffu, page, b & 31);
  if (b < p.boxes_per_tile && !(edge_boxes & (1u << b))) {
    const int k0 = key0 + b * box_rows;
    const int slot = T::CONTIG ? k0 : k0 % p.a.view.kv.block_size;
    const int block = T::CONTIG ? static_cast<int>(k.seq) : box_page;
    const int c1 = p.head_inner ? k.kv_head : slot, c2 = p.head_inner ? slot : k.kv_head;
    tma_load_4d(tile + b * box_rows * 128 + half * (T::kBlockN * 128), map, full, 64 * half, c1, c2, block);
  }
}

// ---- producer: row copies -------------------------------------------------------------

// Producer warp pw's 32 rows of a K or V tile: at step j, lanes 0-15 copy
// the 16 chunks of row 2 j (lane j's key), lanes 16-31 those of row 2 j + 1
// (lane 16 + j's key): lane i owns key 32 pw + 2 (i % 16) + i / 16, so the
// shuffle's source is the immediate j within each half-warp. `my_row` is
// where this lane's key row starts, in 16-byte units from the cache's base
// (0 outside [key_lo, key_hi): zero fill; sm90_ws_supports keeps the row
// producer to caches under 64 GiB). `chunk_base` is the cache's base plus
// this lane's chunk (lane % 16) times 16 bytes. Bit j of `valid` says whether the row this lane
// copies at step j is a real key; all ones (every tile but a sequence's or
// a window's edge): the copy is four instructions (shuffle, the address in
// two, cp.async). `dst_lane[q]` is this lane's byte offset in the tile of row
// 32 pw + 2 q + lane / 16 (its chunk lane % 16, swizzled); row + 8 i adds
// 1024 i and keeps the swizzle. Each lane arrives on `full` once its own
// copies have landed. (docs/performance.md, ws8-ws10: 64-bit element
// offsets through shared memory, read back per copy, took 26 dependent
// instructions per 16-byte copy; a 32-bit row by shuffle, 8.)
//
// Head dim 64 (kLanes = 8: 128-byte rows): lanes 8 q .. 8 q + 7 copy row
// 4 j + q at step j, 8 steps; lane i owns key 32 pw + 4 (i % 8) + i / 8, and
// `dst_lane[q]` (q < 2) is row 32 pw + 4 q + lane / 8, chunk lane % 8. In
// general kLanes lanes a row, R = 32 / kLanes rows a step, kRows rows a
// warp (32; 16 for 64-key tiles) in kRows / R steps, 8 / R destinations a
// lane (row + 8 i adds 1024 i). Head dim 256 (kLanes = 32: 512-byte rows,
// 64-key tiles): the warp copies row j of its 16 at step j, lane i chunk i;
// lanes i and i + 16 own key 16 pw + i % 16.
template <int kLanes, int kRows = 32>
__device__ __forceinline__ void produce_tile_rows(std::uint32_t tile, std::uint32_t full, std::uint64_t chunk_base,
                                                  std::uint32_t my_row, std::uint32_t valid,
                                                  const std::uint32_t (&dst_lane)[kLanes / 4]) {
  static_assert(kLanes == 32 || kLanes == 16 || kLanes == 8, "rows of 512, 256 or 128 bytes");
  constexpr int kDst = kLanes / 4;                 // 8 / (32 / kLanes)
  constexpr int kSteps = kRows * kLanes / 32;      // kRows / (32 / kLanes)
  static_assert(kSteps <= 16 || kLanes < 32, "at most 16 rows a step of one lane each");
  constexpr std::uint32_t kAll = (1u << kSteps) - 1;
  std::uint32_t dst[kDst];
#pragma unroll
  for (int q = 0; q < kDst; ++q) dst[q] = tile + dst_lane[q];
  if (__all_sync(0xffffffffu, (valid & kAll) == kAll)) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const std::uint32_t r = __shfl_sync(0xffffffffu, my_row, j, kLanes);
      std::uint64_t src;
      asm("mad.wide.u32 %0, %1, 16, %2;\n" : "=l"(src) : "r"(r), "l"(chunk_base));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst[j % kDst] + (j / kDst) * 1024), "l"(src)
                   : "memory");
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const std::uint32_t r = __shfl_sync(0xffffffffu, my_row, j, kLanes);
      std::uint64_t src;
      asm("mad.wide.u32 %0, %1, 16, %2;\n" : "=l"(src) : "r"(r), "l"(chunk_base));
      const int src_bytes = (valid >> j) & 1u ? 16 : 0;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst[j % kDst] + (j / kDst) * 1024),
                   "l"(src), "r"(src_bytes)
                   : "memory");
    }
  }
  cp_async_mbar_arrive_noinc(full);
}

// The FP8 form of produce_tile_rows, in two halves a tile apart. A key's row
// is 128 bytes, 8 lanes a row, 4 rows a step: at step j lanes 8 q .. 8 q + 7
// take row 4 j + q of the warp's 32 (lane i owns key 32 pw + 4 (i % 8) +
// i / 8, so the shuffle's source is the immediate j within each group of 8),
// each one 16-byte chunk f = lane % 8 (16 elements).
//
// stage_unit_fp8 copies the row steps [j0, j0 + kSteps) of a tile's raw
// bytes by cp.async into a staging slot (row-major, 128 bytes a key; rows
// outside [key_lo, key_hi) zeros) and commits them as one group;
// widen_unit_fp8 reads back the chunks this lane copied (no other lane's: no
// barrier; the caller waited for the unit's group with the later units
// still in flight), widens each to BF16 chunks 2 f and 2 f + 1 and stores
// them swizzled (`dst_lane[p][c]`: row 32 pw + 4 p + lane / 8, chunk
// 2 (lane % 8) + c, c flipped for lanes 4-7 of eight; row + 8 i adds
// 1024 i). The producer stages unit n + lag
// before it widens unit n, so those units' copies are in flight while it
// widens (session 11: the register form, four 16-byte loads a lane, ran FP8
// prefill at 305 TFLOP/s against BF16's 510; staging a whole tile ahead
// gave 367).
template <int kSteps>
__device__ __forceinline__ void stage_unit_fp8(std::uint32_t slot, std::uint64_t chunk_base, std::uint32_t my_row,
                                               std::uint32_t valid, std::uint32_t slot_lane, int j0) {
#pragma unroll
  for (int jj = 0; jj < kSteps; ++jj) {
    const int j = j0 + jj;
    const std::uint32_t r = __shfl_sync(0xffffffffu, my_row, j, 8);
    std::uint64_t src;
    asm("mad.wide.u32 %0, %1, 16, %2;\n" : "=l"(src) : "r"(r), "l"(chunk_base));
    const int src_bytes = (valid >> j) & 1u ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(slot + slot_lane + jj * 512), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  }
  cp_async_commit();
}

template <KvKind KV, bool kToF16, int kSteps>
__device__ __forceinline__ void widen_unit_fp8(std::uint32_t tile, std::uint32_t slot, std::uint32_t slot_lane,
                                               const std::uint32_t (&dst_lane)[2][2], int j0) {
  // Lanes 4-7 of each eight widen their chunk's high half first (dst_lane
  // says where each half goes), so that each store's eight lanes of a row
  // write eight different swizzle columns: with every lane storing its low
  // half first, lanes f and f + 4 met in one column of the two 64-dim halves
  // (16 KB apart, the same banks), two wavefronts a quarter warp (Nsight
  // Compute, session 20: 13% of the E4M3 kernel's shared wavefronts excess).
  const bool high_first = (threadIdx.x % 8) >= 4;
  // PAGECHECK_WS_FP8_WIDEN_BATCH loads in flight before the first of them is
  // widened (1, the default until measured: load, widen, store, one chunk
  // at a time). The loads and stores are volatile asm with a memory
  // clobber, so each load waits behind the previous chunk's stores:
  // Nsight Compute (session 22, E4M3 8 x 2048) put the producer's most
  // sampled lines on the first use of each load (400-500 samples each,
  // eight a unit).
  constexpr int kBatch = PAGECHECK_WS_FP8_WIDEN_BATCH < kSteps ? PAGECHECK_WS_FP8_WIDEN_BATCH : kSteps;
  static_assert(kBatch >= 1 && kSteps % kBatch == 0, "a batch divides the unit's steps");
#pragma unroll
  for (int j1 = 0; j1 < kSteps; j1 += kBatch) {
    uint4 raw[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) raw[b] = ld_shared16(slot + slot_lane + (j1 + b) * 512);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + j1 + b;
      if (high_first) raw[b] = make_uint4(raw[b].z, raw[b].w, raw[b].x, raw[b].y);
      uint4 first, second;
      fp8x16_widen<KV, kToF16>(raw[b], first, second);
      st_shared16(tile + dst_lane[j % 2][0] + (j / 2) * 1024, first);
      st_shared16(tile + dst_lane[j % 2][1] + (j / 2) * 1024, second);
    }
  }
}

// FP8 P V (WsTraits::kFp8PV): P times this before its E4M3 parts (the lazy
// softmax's largest P, 2^8, lands on E4M3's 448); the output divides it out.
constexpr float kFp8PScale = 448.f / 256.f;

// FP8 P V's V^T: producer warp pw's 32 staged keys (one unit: key kw's 128
// bytes at warp_slot + 128 kw, as stage_unit_fp8 leaves them) into columns
// 32 pw .. 32 pw + 31 of the V^T tile (128 dim rows of 128 key bytes,
// 128-byte swizzle), column 32 pw + k holding key perm(k) = 2 (k / 4 % 4) +
// k % 2 + 8 (k % 4 / 2) + 16 (k / 16): the order in which pack_p_fp8's
// registers present the keys. Lane L takes dims 4 L .. 4 L + 3: a 32-bit
// load a key (a warp's loads read one 128-byte row: no bank conflicts),
// 4 x 4 byte transposes by PRMT, a 16-byte store a dim row and 16 keys,
// the dims rotated by L / 2 so that 8 lanes' stores hit 8 swizzle columns.
// Other lanes' staged rows: __syncwarp after each lane's own cp.async wait;
// and again after the reads, before any lane stages into the slot anew.
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ void transpose_unit_fp8(std::uint32_t tile, std::uint32_t warp_slot, int pw, int lane) {
  __syncwarp();
  const int n0 = 4 * lane, rot = (lane >> 1) & 3;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    std::uint32_t out[4][4];  // [dim n0 + d][word i: keys of columns 16 c + 4 i .. + 3]
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int kb = 16 * c + 2 * i;  // columns 16 c + 4 i + {0, 1, 2, 3}: keys kb, kb + 1, kb + 8, kb + 9
      const std::uint32_t w0 = ld_shared32(warp_slot + kb * 128 + n0);
      const std::uint32_t w1 = ld_shared32(warp_slot + (kb + 1) * 128 + n0);
      const std::uint32_t w2 = ld_shared32(warp_slot + (kb + 8) * 128 + n0);
      const std::uint32_t w3 = ld_shared32(warp_slot + (kb + 9) * 128 + n0);
      const std::uint32_t t0 = prmt(w0, w1, 0x5140), t1 = prmt(w0, w1, 0x7362);
      const std::uint32_t t2 = prmt(w2, w3, 0x5140), t3 = prmt(w2, w3, 0x7362);
      out[0][i] = prmt(t0, t2, 0x5410);
      out[1][i] = prmt(t0, t2, 0x7632);
      out[2][i] = prmt(t1, t3, 0x5410);
      out[3][i] = prmt(t1, t3, 0x7632);
    }
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      const int dd = (d + rot) & 3;
      uint4 v;
      v.x = dd == 0 ? out[0][0] : dd == 1 ? out[1][0] : dd == 2 ? out[2][0] : out[3][0];
      v.y = dd == 0 ? out[0][1] : dd == 1 ? out[1][1] : dd == 2 ? out[2][1] : out[3][1];
      v.z = dd == 0 ? out[0][2] : dd == 1 ? out[1][2] : dd == 2 ? out[2][2] : out[3][2];
      v.w = dd == 0 ? out[0][3] : dd == 1 ? out[1][3] : dd == 2 ? out[2][3] : out[3][3];
      const int n = n0 + dd, chunk = 2 * pw + c;
      st_shared16(tile + n * 128 + (((chunk ^ (n & 7)) & 7) << 4), v);
    }
  }
  __syncwarp();
}

// FP8-K's query (WsTraits::kFp8K): row r of the work tile k, the 64 dims
// of column half `half` (a pair of consumer threads a row), as two E4M3
// parts of the row scaled by 2^sh, its largest element in [128, 256): hi =
// E4M3(q 2^sh) at q_buf (128-byte swizzled rows, as Q in the operand type
// is), lo = E4M3(q 2^sh - hi) kBlockM rows on; hi + lo holds each element
// to ~2^-8 of itself (the last bits of elements under 2^-6 of the row's
// largest go to E4M3's subnormals). 2^-sh goes to row_scale[r] for the
// softmax. Rows past the sequence's query are zeros (scale 1).
template <int kBlockM>
__device__ __forceinline__ void split_q_fp8_parts(const float (&f)[8][8], int r, int half, std::uint32_t q_buf,
                                                  std::uint32_t row_scale);
template <int kBlockM>
__device__ __forceinline__ void load_q_fp8_parts(const DeviceCaseView& view, const Work& k, int group, int r,
                                                 int half, std::uint32_t q_buf, std::uint32_t row_scale) {
  const int row = k.row0 + r;
  float f[8][8];
  if (row < k.rows_total) {
    const std::int64_t token = k.q_begin + row / group;
    const int head = k.kv_head * group + row % group;
    const int elem_bytes = view.query_dtype == DType::F32 ? 4 : 2;
    const char* src = static_cast<const char*>(view.query) + ((token * view.q_heads + head) * 128 + half * 64) * elem_bytes;
#pragma unroll
    for (int c = 0; c < 8; ++c) load8_as_float(view.query_dtype, src + c * 8 * elem_bytes, f[c]);
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int i = 0; i < 8; ++i) f[c][i] = 0.f;
  }
  split_q_fp8_parts<kBlockM>(f, r, half, q_buf, row_scale);
}
// The same from a Q tile the producer's tensor copy left in q_buf (BF16,
// 128-byte swizzled rows in two 64-dim column halves, as the 16-bit kernels
// read it; PAGECHECK_WS_FP8K_QTMA), converted in place: the warpgroup's
// threads all read their rows (`sync`, a named barrier of the warpgroup)
// before any writes its parts over them. Rows past the sequence's query
// hold other tokens (or zeros): their outputs are never stored.
template <int kBlockM, class Sync>
__device__ __forceinline__ void convert_q_fp8_parts(int r, int half, std::uint32_t q_buf, std::uint32_t row_scale,
                                                    Sync sync) {
  float f[8][8];
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const uint4 v = ld_shared16(q_buf + sw128<kBlockM>(r, half * 8 + c));
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[c][2 * i] = __uint_as_float(w[i] << 16);
      f[c][2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  sync();
  split_q_fp8_parts<kBlockM>(f, r, half, q_buf, row_scale);
}
template <int kBlockM>
__device__ __forceinline__ void split_q_fp8_parts(const float (&f)[8][8], int r, int half, std::uint32_t q_buf,
                                                  std::uint32_t row_scale) {
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[c][i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // the row's other half
  int exponent = 0;
  (void)frexpf(amax, &exponent);  // amax = m 2^exponent, m in [0.5, 1)
  int sh = 8 - exponent;
  if (!(amax > 0.f) || !(amax < INFINITY)) sh = 0;  // zeros, infinities, NaN: as they are
  sh = sh < -126 ? -126 : (sh > 126 ? 126 : sh);
  const float scale = __int_as_float((127 + sh) << 23);
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // 16-byte chunk half * 4 + c of the row: dims 16 c .. 16 c + 15 of this half
    std::uint32_t hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < 16; e += 2) {
      const float a = f[2 * c + e / 8][e % 8] * scale, b = f[2 * c + e / 8][e % 8 + 1] * scale;
      const __nv_fp8x2_storage_t h = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(h, __NV_E4M3);
      const float2 hf = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      const __nv_fp8x2_storage_t l =
          __nv_cvt_float2_to_fp8x2(make_float2(a - hf.x, b - hf.y), __NV_SATFINITE, __NV_E4M3);
      hi[e / 4] |= static_cast<std::uint32_t>(h) << (16 * ((e / 2) % 2));
      lo[e / 4] |= static_cast<std::uint32_t>(l) << (16 * ((e / 2) % 2));
    }
    const std::uint32_t at = sw128<kBlockM>(r, half * 4 + c);
    st_shared16(q_buf + at, make_uint4(hi[0], hi[1], hi[2], hi[3]));
    st_shared16(q_buf + kBlockM * 128 + at, make_uint4(lo[0], lo[1], lo[2], lo[3]));
  }
  if (half == 0) st_shared32(row_scale + r * 4, static_cast<std::uint32_t>((127 - sh) << 23));
}

// kSoftcapKernel: a softcap kernel of its own (PAGECHECK_WS_SOFTCAP_KERNEL);
// otherwise one kernel holds both copies of the key-tile loop.
template <class T, bool kSoftcapKernel = false>
__global__ void __launch_bounds__(T::kThreads, 1) attn_ws_kernel(const __grid_constant__ WsParams p) {
#ifdef PAGECHECK_SM90A_DEVICE
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, DK = T::DK;
  constexpr int kDBlocks = T::DV / 8;  // n8 blocks of O
  const DeviceCaseView& view = p.a.view;
  const int group = p.a.group;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw_base = smem_u32(smem_raw);
  const std::uint32_t q_smem = (raw_base + 1023u) & ~1023u;
  const std::uint32_t k_smem = q_smem + T::kQBuffers * T::kQBytes;    // [stage] K tiles
  const std::uint32_t v_smem = k_smem + T::kStages * T::kKTileBytes;   // [stage] V tiles
  const std::uint32_t bars = v_smem + T::kVStages * T::kVTileBytes;
  const std::uint32_t scratch = bars + T::kBarrierBytes;
  const std::uint32_t staging = scratch + T::kScratchBytes;  // FP8: two raw tiles (16-byte aligned)
  const std::uint32_t row_scale = staging + T::kStagingBytes;  // FP8-K: kBlockM floats
  const bool split_q = p.a.split_query != 0;
  const std::uint32_t q_lo_smem = q_smem + T::kQBytes;  // a split query's lo rows (Q buffer 1)
  const auto k_full = [&](int s) { return bars + 8 * s; };
  constexpr int kKS = T::kStages, kVS = T::kVStages;
  const auto v_full = [&](int s) { return bars + 8 * (kKS + s); };
  const auto k_empty = [&](int s) { return bars + 8 * (kKS + kVS + s); };
  const auto v_empty = [&](int s) { return bars + 8 * (2 * kKS + kVS + s); };
  const auto q_full = [&](int b) { return bars + 8 * (2 * (kKS + kVS) + b); };
  const auto q_empty = [&](int b) { return bars + 8 * (2 * (kKS + kVS) + 2 + b); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kKS; ++s) {
      mbar_init(k_full(s), T::kFullArrivals);
      mbar_init(k_empty(s), T::kConsumerWarps);  // one arrival per consumer warp
    }
    for (int s = 0; s < kVS; ++s) {
      mbar_init(v_full(s), T::kFullArrivals);
      mbar_init(v_empty(s), T::kConsumerWarps);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), T::kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kProducerWarp = T::kConsumerWarps;  // the producer warpgroup's first warp (8, or 12)
  if (warp >= kProducerWarp) {
    // ---- producer ------------------------------------------------------------------
    // Tiles in the order the consumers take them: K_0, then K_j with
    // V_{j-1}, then V_{n-1}; `count` numbers tiles over all work of this
    // CTA (stage count % kStages, phase (count / kStages) & 1).
    setmaxnreg_dec<T::kProducerRegs>();
    if (T::kTma && warp != kProducerWarp) return;
    if (warp == kProducerWarp) {
      if (T::kTma) {
        prefetch_tensor_map(&p.key_map);
        prefetch_tensor_map(&p.value_map);
      }
      if (p.q_tma) prefetch_tensor_map(&p.query_map);
      // The output's too, or the consumers' first tensor copy of the
      // output fetches it. Session 19's stamps: the epilogues of each
      // CTA's first work tiles take 1100-2500 cycles more than the rest
      // on average. How much of that is this fetch is not measured.
      if (p.o_tma) prefetch_tensor_map(&p.out_map);
    }
    const int pw = warp - kProducerWarp;  // row producer: warp pw owns keys 32 pw .. 32 pw + 31 of a tile
    // produce_tile_rows and stage_tile_rows_fp8 say why lanes own keys in this order: L lanes
    // copy a row, 32 / L rows a step.
    constexpr int kLanesPerRow = T::kLanesPerRow;
    constexpr int kRowsW = kBlockN / 4;  // a warp's rows of a tile: 32 (16 at head dim 256)
    const int my_key =
        kRowsW * pw + ((32 / kLanesPerRow) * (lane % kLanesPerRow) + lane / kLanesPerRow) % kRowsW;
    std::uint32_t dst_lane[kLanesPerRow / 4];  // produce_tile_rows
    std::uint32_t dst_lane_fp8[2][2];  // widen_unit_fp8
    if constexpr (T::kFp8) {
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int c = 0; c < 2; ++c)  // widen_unit_fp8's store c: lanes 4-7 of eight store the high half first
          dst_lane_fp8[q][c] = sw128<kBlockN>(32 * pw + 4 * q + lane / 8, 2 * (lane % 8) + (c ^ (lane % 8 >= 4)));
    }
    if constexpr (!T::kFp8 || T::kFp8K) {  // FP8-K: K's 128-byte rows as they are
#pragma unroll
      for (int q = 0; q < kLanesPerRow / 4; ++q)
        dst_lane[q] = sw128<kBlockN>(kRowsW * pw + (32 / kLanesPerRow) * q + lane / kLanesPerRow, lane % kLanesPerRow);
    }
    // The caches' bases plus this lane's 16-byte chunk of a row.
    const std::uint64_t key_chunk =
        reinterpret_cast<std::uint64_t>(view.kv.key_data) + (lane % kLanesPerRow) * 16;
    const std::uint64_t value_chunk =
        reinterpret_cast<std::uint64_t>(view.kv.value_data) + (lane % kLanesPerRow) * 16;
    std::int64_t count = 0, item = 0;
    // FP8: units staged (`staged`) and widened (`widened`), in order, over
    // all work of this CTA; the tiles with units not yet widened, oldest
    // first, as (c << 1) | value in pend[0 .. npend) (at most three: the lag
    // is under two tiles). A unit's slot is its number % kFp8Slots.
    constexpr int kSteps = 8 / T::kFp8Units;
    std::int64_t staged = 0, widened = 0;
    std::uint64_t pend[3] = {0, 0, 0};
    int npend = 0;
    // This lane's first chunk in a staging slot: row (32 / units) pw + lane / 8, chunk lane % 8.
    const std::uint32_t slot_lane =
        static_cast<std::uint32_t>(((32 / T::kFp8Units) * pw + lane / 8) * 128 + (lane % 8) * 16);
    const auto slot_of = [&](std::int64_t unit) {
      return staging + static_cast<std::uint32_t>(unit % T::kFp8Slots) * T::kFp8UnitBytes;
    };
    // Widens the oldest unit not yet widened, once its group is in (kAfter
    // later groups may stay in flight): the first unit of a tile waits for
    // its K or V stage to be free, the last arrives on the stage's full
    // barrier. V to the P V operand type, K to the Q K^T one.
    const auto widen_next = [&](auto after_c) {
      constexpr int kAfter = decltype(after_c)::value;
      // FP8-K stages V alone (load below), so its K branches are dead: said
      // at compile time, the producer's code loses the K widening (to BF16,
      // about 500 instructions between its hot lines).
      const bool value = T::kFp8K || (pend[0] & 1u);
      const std::int64_t c = static_cast<std::int64_t>(pend[0] >> 1);
      const int unit = static_cast<int>(widened % T::kFp8Units);
      const int ns = value ? kVS : kKS;  // K's or V's stages
      const int s = static_cast<int>(c % ns);
      if (unit == 0 && c >= ns) mbar_wait(value ? v_empty(s) : k_empty(s), static_cast<int>((c / ns) & 1) ^ 1);
      const std::uint32_t tile = value ? v_smem + s * T::kVTileBytes : k_smem + s * T::kKTileBytes;
      const std::uint32_t slot = slot_of(widened);
      cp_async_wait<kAfter>();
      if (T::kFp8PV && value)
        transpose_unit_fp8(tile, slot + pw * 4096, pw, lane);
      else if (value)
        widen_unit_fp8<T::KV, T::kF16V, kSteps>(tile, slot, slot_lane, dst_lane_fp8, unit * kSteps);
      else
        widen_unit_fp8<T::KV, T::kF16K, kSteps>(tile, slot, slot_lane, dst_lane_fp8, unit * kSteps);
      ++widened;
      if (unit == T::kFp8Units - 1) {
        fence_proxy_async();  // the consumers' tensor-core reads (they fence too)
        mbar_arrive(value ? v_full(s) : k_full(s));
        pend[0] = pend[1];
        pend[1] = pend[2];
        --npend;
      }
    };
    for (std::int64_t w = blockIdx.x; w < p.order.num_work; w += gridDim.x) {
      Work k;
      if (!decode_work<kBlockM, kBlockN>(p, w, k)) continue;
      if (p.q_tma && warp == kProducerWarp) {
        // Q of this work tile into buffer item % kQBuffers, once the
        // consumers are done with the work tile kQBuffers before.
        const int b = static_cast<int>(item % T::kQBuffers);
        if (item >= T::kQBuffers) mbar_wait(q_empty(b), static_cast<int>((item / T::kQBuffers) & 1) ^ 1);
        if (lane == 0) {
          const std::uint32_t dst = q_smem + b * T::kQBytes;
          const int token0 = static_cast<int>(k.q_begin + k.row0 / group);
          const int head0 = k.kv_head * group;
          mbar_arrive_expect_tx(q_full(b), T::kQBytes);
#pragma unroll
          for (int h = 0; h < T::kHalves; ++h)
            tma_load_3d(dst + h * (kBlockM * 128), &p.query_map, q_full(b), 64 * h, head0, token0);
        }
        __syncwarp();
      }
      ++item;
      if (k.num_tiles == 0) continue;
      // This sequence's row of the block table.
      const std::int32_t* table = T::CONTIG ? nullptr : view.kv.page_indices + view.kv.page_indptr[k.seq];
      // Tensor copies: lane b reads the page of box b, for every box with a
      // slot in [key_lo, seq_len) (whole boxes past key_hi are copied too:
      // their keys are real, S masks them); rows: each lane the page of its
      // key in [key_lo, key_hi). 0 elsewhere: the entry may not exist.
      const auto load_page = [&](int kt) -> std::int32_t {
        if constexpr (T::CONTIG) {
          return 0;
        } else if constexpr (T::kTma) {
          if (lane >= p.boxes_per_tile) return 0;
          const int k0 = kt * kBlockN + lane * p.box_rows;
          if (k0 >= k.seq_len || k0 + p.box_rows <= k.key_lo) return 0;
          return ld_global_nc(table + k0 / view.kv.block_size);
        } else {
          const int key = kt * kBlockN + my_key;
          if (key < k.key_lo || key >= k.key_hi) return 0;
          return ld_global_nc(table + block_of(p.a, key));
        }
      };
      // Rows: this lane's key row in K and in V (16-byte units; 0 outside
      // [key_lo, key_hi)), computed once per key tile for both in 32 bits,
      // and the warp's ballot of real keys, shifted to the rows this lane
      // copies.
      struct Rows {
        std::uint32_t key = 0, value = 0, valid = 0;
      };
      const std::uint32_t head_k = static_cast<std::uint32_t>(k.kv_head) * p.row_head[0];
      const std::uint32_t head_v = static_cast<std::uint32_t>(k.kv_head) * p.row_head[1];
      const auto rows_of = [&](int kt, std::int32_t page) -> Rows {
        Rows r;
        if constexpr (!T::kTma) {
          const int key = kt * kBlockN + my_key;
          const bool valid = key >= k.key_lo && key < k.key_hi;
          if (valid) {
            const std::uint32_t slot = static_cast<std::uint32_t>(key - block_of(p.a, key) * view.kv.block_size);
            const std::uint32_t pg = static_cast<std::uint32_t>(page);
            r.key = pg * p.row_block[0] + slot * p.row_slot[0] + head_k;
            r.value = pg * p.row_block[1] + slot * p.row_slot[1] + head_v;
          }
          // bit j: the key of lane L (lane / L) + j, the row this lane copies at step j
          r.valid = __ballot_sync(0xffffffffu, valid) >> (lane & ~(kLanesPerRow - 1));
        }
        return r;
      };
      const auto load = [&](bool value, int kt, std::int32_t page, const Rows& rows, std::int64_t c) {
        // FP8: staged and widened (FP8-K: V only; K is copied below as it is).
        if constexpr (T::kFp8) {
          if (!T::kFp8K || value) {
            // Stage this tile's raw bytes unit by unit; after each, widen the
            // unit kFp8Lag before it (its slot is the one the next unit takes).
            const std::uint64_t desc = (static_cast<std::uint64_t>(c) << 1) | (value ? 1u : 0u);
            if (npend == 0)
              pend[0] = desc;
            else if (npend == 1)
              pend[1] = desc;
            else
              pend[2] = desc;
            ++npend;
#pragma unroll
            for (int u = 0; u < T::kFp8Units; ++u) {
              if (T::kFp8K || value)
                stage_unit_fp8<kSteps>(slot_of(staged), value_chunk, rows.value, rows.valid, slot_lane, u * kSteps);
              else
                stage_unit_fp8<kSteps>(slot_of(staged), key_chunk, rows.key, rows.valid, slot_lane, u * kSteps);
              ++staged;
              if (staged > T::kFp8Lag) widen_next(std::integral_constant<int, T::kFp8Lag>{});
            }
            return;
          }
        }
        const int ns = value ? kVS : kKS;  // K's or V's stages
        const int s = static_cast<int>(c % ns);
        if (c >= ns) mbar_wait(value ? v_empty(s) : k_empty(s), static_cast<int>((c / ns) & 1) ^ 1);
        const std::uint32_t tile = value ? v_smem + s * T::kVTileBytes : k_smem + s * T::kKTileBytes;
        const std::uint32_t full = value ? v_full(s) : k_full(s);
        if constexpr (T::kTma) {
          if (value)
            produce_tile_tma<T, true>(p, tile, full, kt, page, k, lane);
          else
            produce_tile_tma<T, false>(p, tile, full, kt, page, k, lane);
        } else {
          // Two calls, not a select of the base: a selected base sat in two
          // unpaired registers, and every address took a 64-bit add more.
          if (value) {
            produce_tile_rows<kLanesPerRow, kRowsW>(tile, full, value_chunk, rows.value, rows.valid, dst_lane);
          } else {
            produce_tile_rows<kLanesPerRow, kRowsW>(tile, full, key_chunk, rows.key, rows.valid, dst_lane);
          }
        }
      };
      std::int32_t page = load_page(k.tile_first);
      std::int32_t next_page = k.num_tiles > 1 ? load_page(k.tile_first + 1) : 0;
      if constexpr (T::kFp8K) {
        // K_j, then V_j staged at once (a tile before the consumers take
        // it, so its widening, 2N - 1 units behind, never waits on a K stage
        // that the consumers free only after V_{j-1}).
        for (int j = 0; j < k.num_tiles; ++j) {
          if (j > 0) {
            page = next_page;
            if (j + 1 < k.num_tiles) next_page = load_page(k.tile_first + j + 1);  // a tile ahead
          }
          const Rows rows = rows_of(k.tile_first + j, page);
          load(false, k.tile_first + j, page, rows, count + j);
          load(true, k.tile_first + j, page, rows, count + j);
        }
        count += k.num_tiles;
        continue;
      }
      Rows rows = rows_of(k.tile_first, page);
      load(false, k.tile_first, page, rows, count);
      for (int j = 1; j < k.num_tiles; ++j) {
        const std::int32_t prev_page = page;
        const Rows prev_rows = rows;
        page = next_page;
        if (j + 1 < k.num_tiles) next_page = load_page(k.tile_first + j + 1);  // a tile ahead
        rows = rows_of(k.tile_first + j, page);
        load(false, k.tile_first + j, page, rows, count + j);
        load(true, k.tile_first + j - 1, prev_page, prev_rows, count + j - 1);
      }
      load(true, k.tile_first + k.num_tiles - 1, page, rows, count + k.num_tiles - 1);
      count += k.num_tiles;
    }
    if constexpr (T::kFp8)
      while (widened < staged) widen_next(std::integral_constant<int, 0>{});
    return;
  }

  // ---- consumer warpgroups ----------------------------------------------------------
  setmaxnreg_inc<T::kConsumerRegs>();
  const int wg = threadIdx.x / 128;  // 0 .. kWGs - 1: query rows 64 wg .. 64 wg + 63 of a work tile
  const int wg_thread = threadIdx.x % 128;
  const int warp_in_wg = warp % 4;
  const int g = lane / 4, t = lane % 4;
  const int wg_row = wg * 64 + warp_in_wg * 16;  // first row of this warp inside the tile
  const bool causal = view.causal;
  const std::int64_t window = view.window;
  const bool has_softcap = T::kOwnSoftcapKernel ? kSoftcapKernel : p.a.softcap_out != 0.f;
  const std::uint32_t q_lo_wg = q_lo_smem + wg * 64 * 128;

  const auto turn_sync = [&] { named_sync(kTurnBar + wg, 256); };
  const auto turn_pass = [&] { named_arrive(kTurnBar + (wg + 1 == T::kWGs ? 0 : wg + 1), 256); };
  const auto release = [&](std::uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // Tiles a row producer filled: its generic-proxy writes, seen through the
  // mbarrier, are made visible to the tensor cores' reads.
  const auto landed = [&] {
    if constexpr (!T::kTma) fence_proxy_async();
  };

  // Warpgroup 0 issues first; it consumes the last warpgroup's last pass at
  // the end. The turn goes round 0, 1, .. kWGs - 1; every warpgroup takes
  // the same turns (the same work tiles and key tiles).
  if (wg == T::kWGs - 1) turn_pass();
  std::int64_t count = 0, item = 0;
#if PAGECHECK_WS_TRACE == 4
  int timeline_n = 0;
#endif
  // The Q buffer whose output rows this warp's lane 0 is still storing by
  // tensor copy (-1: none). The warp releases it to the producer once the
  // copies have read it: after the next work tile's S_0, a work tile before
  // the producer needs it.
  int out_pending = -1;
  const auto finish_out_store = [&] {
    if (__any_sync(0xffffffffu, out_pending >= 0)) {  // a vote: uniform, or every wgmma is serialised (C7520)
      if (lane == 0) bulk_wait_read_all();
      release(q_empty(out_pending));
      out_pending = -1;
    }
  };
  // The next work tile's sequence values are loaded before this one's
  // epilogue, so their latency (about 1000 cycles between two work tiles,
  // clock stamps, H100) runs under it.
  WorkAhead ahead = fetch_work<kBlockM, kBlockN>(p, blockIdx.x);
  // S of the key tile in hand. With kEarlyS it crosses the work loop: the
  // next work tile's S_0, issued in this one's last turn (pre: the work
  // tile `next` whose S_0 is in it, retired, its Q waited for).
  float sacc[T::kSFloats];
  Work next;
  bool pre = false;
  while (ahead.w < p.order.num_work) {
    Work k;
    WS_TRACE(0);
#if PAGECHECK_WS_TRACE == 5
    WS_TRACE_AT(15, 5);
#endif
    if (T::kEarlyS && pre) {
      k = next;
    } else if (!finish_work<kBlockM, kBlockN>(p, ahead, k)) {
      ahead = fetch_work<kBlockM, kBlockN>(p, ahead.w + gridDim.x);
      continue;
    }
    // kEarlyS: the work tile after this one is decoded before the last P V
    // (its loads land under the key tiles).
    if constexpr (T::kEarlyS) ahead = fetch_work<kBlockM, kBlockN>(p, ahead.w + gridDim.x);
    WS_TRACE(1);
    WS_TRACE_AT(8, k.num_tiles);
    WS_TRACE_AT(9, ahead.w);
    const int q_buf = split_q ? 0 : static_cast<int>(item % T::kQBuffers);
    const std::uint32_t q_wg = q_smem + q_buf * T::kQBytes + wg * 64 * 128;  // this warpgroup's 64 rows (8 atoms)

    // FP8-K: the query's E4M3 parts (the hi part where Q is, the lo part
    // kBlockM rows on) and each row's inverse scale, for this thread's rows
    // g and g + 8.
    const std::uint32_t q_lo_fp8 = q_wg + kBlockM * 128;
    float q_inv[2] = {1.f, 1.f};
    if constexpr (T::kFp8K) {
      if (p.q_tma) {
        mbar_wait(q_full(q_buf), static_cast<int>((item / T::kQBuffers) & 1));
        convert_q_fp8_parts<kBlockM>(wg * 64 + wg_thread / 2, wg_thread % 2, q_smem + q_buf * T::kQBytes, row_scale,
                                     [&] { named_sync(kQBar + wg, 128); });
      } else {
        load_q_fp8_parts<kBlockM>(view, k, group, wg * 64 + wg_thread / 2, wg_thread % 2, q_smem + q_buf * T::kQBytes,
                                  row_scale);
      }
      fence_proxy_async();
      named_sync(kQBar + wg, 128);  // this warpgroup's Q rows are in
      q_inv[0] = __uint_as_float(ld_shared32(row_scale + (wg_row + g) * 4));
      q_inv[1] = __uint_as_float(ld_shared32(row_scale + (wg_row + g + 8) * 4));
    } else if (p.q_tma) {
      if (!(T::kEarlyS && pre)) mbar_wait(q_full(q_buf), static_cast<int>((item / T::kQBuffers) & 1));
    } else {
      // This warpgroup's 64 Q rows -> smem (operand type); rows past the
      // sequence's query are zeros. Its previous S GEMMs have completed.
      const QTileSource qs = q_tile_source<T::kF16K>(view, k.q_begin, k.kv_head, group, k.rows_total);
#pragma unroll 2
      for (int i = wg_thread; i < 64 * T::kChunks; i += 128) {
        const int r = wg * 64 + i / T::kChunks, chunk = i % T::kChunks;
        load_q_chunk<T::kF16K, DK>(qs, k.row0 + r, chunk, q_smem + q_buf * T::kQBytes + sw128<kBlockM>(r, chunk),
                                  split_q, T::kQBytes);  // buffer 0 -> buffer 1
      }
      cp_async_commit();
      cp_async_wait<0>();
      fence_proxy_async();
      named_sync(kQBar + wg, 128);  // this warpgroup's Q rows are in
    }

    WS_TRACE(2);
#if PAGECHECK_WS_TRACE == 2
    long long loop_sum[5] = {0, 0, 0, 0, 0};
#endif
    float o[T::DV / 2];
#pragma unroll
    for (int i = 0; i < T::DV / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    const auto issue_s = [&](float (&sacc)[T::kSFloats], std::uint32_t ks) {
      if constexpr (T::kFp8K)
        issue_qk_fp8<T::KV == KvKind::E5M2, kBlockM>(sacc, q_wg, q_lo_fp8, ks);
      else
        issue_qk<T::kF16K, kBlockM, kBlockN, DK>(sacc, q_wg, q_lo_wg, ks, split_q);
    };
    const auto issue_pv_tile = [&](const std::uint32_t (&pa)[kBlockN / 16][4], std::uint32_t vs) {
      if constexpr (T::kFp8PV)
        issue_pv_fp8<T::KV == KvKind::E5M2, kBlockN>(o, pa, vs);
      else
        issue_pv<T::kF16V, kBlockN, T::DV>(o, pa, vs);
    };
    // Masks S of key tile kt, turns it into P in place (unnormalised, base
    // 2) and updates m and l; `alphas` receives O's rescale factors.
    // kSoftcap is a compile-time copy of has_softcap: with one shared
    // copy of the tile loop, the tanh's temporaries raised the register
    // pressure at the join, and ptxas put wait<0> (P V done) before the
    // exponentials to borrow P's registers for the row sums, so the softmax
    // no longer ran under P V.
    const auto softmax = [&](auto softcap_c, float (&sacc)[T::kSFloats], int kt, float (&alphas)[2]) {
      constexpr bool kSoftcap = decltype(softcap_c)::value;
      const float exp_scale = kSoftcap ? 1.f : p.a.logit_mul;
      // FP8-K: each row's S carries its query scale; its multiplier is
      // logit_mul times the row's inverse scale (a power of two: exact).
      const float row_mul[2] = {p.a.logit_mul * q_inv[0], p.a.logit_mul * q_inv[1]};
      if constexpr (kSoftcap) {
#pragma unroll
        for (int e = 0; e < T::kSFloats; ++e) {
          const float x = sacc[e] * (T::kFp8K ? row_mul[(e >> 1) & 1] : p.a.logit_mul);
          sacc[e] = p.a.softcap_out * (PAGECHECK_WS_FAST_TANH ? tanh_ex2(x) : tanhf(x));
        }
      }
      const int n0 = kt * kBlockN;
      const bool need_mask = k.needs_mask<kBlockN>(n0, causal, window);
      if (need_mask)
        mask_tile(
            sacc, n0, t, k.row0 + wg_row + g,
            [&](int r) { return k.pos0 + static_cast<int>(fast_div(static_cast<std::uint32_t>(r), p.div_group)); },
            k.key_lo, k.key_hi, causal, window);
      // The lazy reference: O is rescaled only when a row's max grows by
      // 2^8 (+1.2-2.9% at the bench shapes on the H100, session 9).
      if constexpr (T::kFp8K && !kSoftcap)
        softmax_rows_lazy<T::kPolyEvery>(sacc, m, l, alphas, row_mul);
      else
        softmax_rows_lazy<T::kPolyEvery>(sacc, m, l, alphas, exp_scale);
    };
    const auto to_operand = [&](const float (&sacc)[T::kSFloats], std::uint32_t (&pa)[kBlockN / 16][4]) {
      if constexpr (T::kFp8PV)
        pack_p_fp8<kBlockN>(sacc, pa, kFp8PScale);
      else
        pack_p<T::kF16V, kBlockN>(sacc, pa);
    };

    // kEarlyS: the row sums, scales and LSEs (made before the last turn
    // where this work tile's last P V carries the next one's S_0), and
    // whether it does.
    float inv[2], lse[2];
    bool early = false;
    const auto row_stats = [&] {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = row_sum(l[h]), m_row = m[h];
        const int row = k.row0 + wg_row + g + 8 * h;
        const int head = k.kv_head * group + (row - static_cast<int>(fast_div(static_cast<std::uint32_t>(row), p.div_group)) * group);
        // Approximate division and log2 (sum >= 1: the row's largest term is
        // 1): the IEEE ones took ~1100 of the epilogue's 4400 cycles with
        // their slow paths (clock stamps, session 8).
        const float keep = PAGECHECK_WS_FLAT_STATS ? add_sink_row_flat(view.sinks, head, m_row, sum)
                                                   : add_sink_row(view.sinks, head, m_row, sum);
        const float num = p.a.out_scale * keep * (T::kFp8PV ? 1.f / kFp8PScale : 1.f);
        if constexpr (PAGECHECK_WS_FLAT_STATS)
          inv[h] = sum > 0.f ? num * fast_rcp(sum > 0.f ? sum : 1.f) : 0.f;
        else
          inv[h] = sum > 0.f ? __fdividef(num, sum) : 0.f;
        lse[h] = sum > 0.f ? (m_row + fast_log2(sum)) * 0.6931471805599453f : -INFINITY;
      }
    };

    // The row LSEs, stored after the Q buffer's release (a global store
    // before the proxy fence would hold that fence until it completes).
    const auto store_lse = [&] {
      if (view.lse == nullptr || t != 0) return;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = k.row0 + wg_row + g + 8 * h;
        if (row >= k.rows_total) continue;
        const int row_token = static_cast<int>(fast_div(static_cast<std::uint32_t>(row), p.div_group));
        view.lse[(k.q_begin + row_token) * view.q_heads + k.kv_head * group + (row - row_token * group)] = lse[h];
      }
    };
    // 16-bit outputs are staged in this warpgroup's rows of the work tile's
    // Q buffer (its S GEMMs are done), 16-byte chunks XOR-swizzled by row as
    // Q has them. One stmatrix.x4 per two n8 blocks: matrix k is block
    // d + k / 2, rows 8 (k % 2) .. + 7 of the warp's 16; lane L gives the
    // address of row L % 8 of matrix L / 8 (8 stores where st.shared.b32
    // took 32).
    const bool f16_out = view.output_dtype == DType::F16;
    const std::uint32_t stage = q_smem + q_buf * T::kQBytes + wg_row * 128;  // this warp's row 0, column half 0
    const auto stage_rows = [&] {
      const std::uint32_t row_base = stage + ((lane / 8) % 2 * 8 + lane % 8) * 128;
#pragma unroll
      for (int d = 0; d < kDBlocks; d += 2) {
        std::uint32_t r[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int dd = d + m / 2, h = m % 2;
          const float x = o[dd * 4 + 2 * h] * inv[h], y = o[dd * 4 + 2 * h + 1] * inv[h];
          r[m] = f16_out ? pack2<true>(x, y) : pack2<false>(x, y);
        }
        const int chunk = d + lane / 16;
        stmatrix_x4(row_base + (chunk >> 3) * (kBlockM * 128) + (((chunk & 7) ^ (lane % 8)) << 4), r[0], r[1], r[2],
                    r[3]);
      }
    };
    // The staged rows by two tensor copies (column halves) of 16 / group
    // tokens from lane 0, after every lane's proxy fence (o_tma).
    const auto store_out_tma = [&] {
      if (lane == 0) {
        const int token0 = static_cast<int>(k.q_begin + (k.row0 + wg_row) / group);
        const int head0 = k.kv_head * group;
#pragma unroll
        for (int h = 0; h < T::kHalves; ++h)
          tma_store_3d(&p.out_map, stage + h * (kBlockM * 128), 64 * h, head0, token0);
        bulk_commit();
      }
      out_pending = q_buf;
    };

    const auto run_tiles = [&](auto softcap_c) {
      std::uint32_t pa[kBlockN / 16][4];
      float alphas[2];
      if (T::kEarlyS && pre) {
        // Tile 0's S came in the last turn of the work tile before, retired
        // (and its K stage released) in its epilogue.
        WS_TRACE(3);
        WS_TRACE(4);
        softmax(softcap_c, sacc, k.tile_first, alphas);
        to_operand(sacc, pa);
        finish_out_store();  // the work tile before's output copies (issued just before)
        WS_TRACE_EARLY(10);
      } else {
        // Tile 0: S alone.
        const int s = static_cast<int>(count % T::kStages);
        mbar_wait(k_full(s), static_cast<int>((count / T::kStages) & 1));
        landed();
        turn_sync();
        WS_TRACE(3);
        wgmma_fence();
        issue_s(sacc, k_smem + s * T::kKTileBytes);
        wgmma_commit();
        turn_pass();
        wgmma_wait<0>();
        fence_regs(sacc);
        WS_TRACE(4);
        release(k_empty(s));
        finish_out_store();  // not before the wait: divergent code there serialises every wgmma (C7520)
        softmax(softcap_c, sacc, k.tile_first, alphas);
        to_operand(sacc, pa);
      }
      for (int i = 1; i < k.num_tiles; ++i) {
        const std::int64_t c = count + i;
        const int s = static_cast<int>(c % kKS), sp = static_cast<int>((c - 1) % kVS);
        WS_LOOP_MARK(t0);
        mbar_wait(k_full(s), static_cast<int>((c / T::kStages) & 1));
        landed();
        turn_sync();
        WS_LOOP_MARK(t1);
        WS_LOOP_ADD(0, t0, t1);
        wgmma_fence();
        issue_s(sacc, k_smem + s * T::kKTileBytes);
        wgmma_commit();
        mbar_wait(v_full(sp), static_cast<int>(((c - 1) / kVS) & 1));
        landed();
        issue_pv_tile(pa, v_smem + sp * T::kVTileBytes);
        wgmma_commit();
        turn_pass();
        wgmma_wait<1>();  // S_i done, P_{i-1} V_{i-1} may still run
        fence_regs(sacc);
        WS_LOOP_MARK(t2);
        WS_LOOP_ADD(1, t1, t2);
        release(k_empty(s));
        softmax(softcap_c, sacc, k.tile_first + i, alphas);
        if constexpr (T::kSumStore) st_shared32(scratch + threadIdx.x * 4, __float_as_uint(l[0] + l[1]));
        WS_LOOP_MARK(t3);
        WS_LOOP_ADD(2, t2, t3);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(sacc);
        fence_regs_u(pa);
        WS_LOOP_MARK(t4);
        WS_LOOP_ADD(3, t3, t4);
        release(v_empty(sp));
        rescale_o(o, alphas);
        to_operand(sacc, pa);
#if PAGECHECK_WS_TRACE == 2 || PAGECHECK_WS_TRACE == 4
        fence_regs_u(pa);  // the stamp after P is packed
#endif
        WS_LOOP_MARK(t5);
        WS_LOOP_ADD(4, t4, t5);
      }
      // P V of the last tile.
      {
        const std::int64_t c = count + k.num_tiles - 1;
        const int sp = static_cast<int>(c % kVS);
        // kEarlyS: the next work tile's S_0 in this turn, where its query and
        // its first K tile are in and this one's output leaves whole by
        // tensor copies (every warp's rows real, so every warp takes the
        // same branch in the epilogue and every warpgroup the same turns).
        std::uint32_t early_q = 0, early_k = 0;
        int early_s = 0;
        WS_TRACE_EARLY(11);
        if constexpr (T::kEarlyS) {
          early = p.o_tma && p.q_tma && k.num_tiles >= 2 && k.row0 + kBlockM <= k.rows_total &&
                  ahead.w < p.order.num_work && finish_work<kBlockM, kBlockN>(p, ahead, next) && next.num_tiles > 0;
          early = __all_sync(0xffffffffu, early);  // uniform by construction; the vote says so to ptxas
          WS_TRACE_EARLY(12);
          // Made here whether or not S_0 comes early (the epilogue makes them
          // again where it does not): under `if (early)` ptxas spilled 136
          // bytes more over the kernels that take this path.
          row_stats();
          WS_TRACE_EARLY(13);
          if (early) {
            const std::int64_t cn = c + 1;
            const int sn = static_cast<int>(cn % kKS), qn = static_cast<int>((item + 1) % T::kQBuffers);
            early_q = q_smem + qn * T::kQBytes + wg * 64 * 128;
            early_k = k_smem + sn * T::kKTileBytes;
            early_s = sn;
            mbar_wait(q_full(qn), static_cast<int>(((item + 1) / T::kQBuffers) & 1));
            mbar_wait(k_full(sn), static_cast<int>((cn / kKS) & 1));
            WS_TRACE_EARLY(14);
          }
        }
        mbar_wait(v_full(sp), static_cast<int>((c / kVS) & 1));
        landed();
        if (T::kEarlyS && early) {
          // The whole of S_0's flight in this branch (no join before its
          // wait: a path on which the softmax rewrote S before the wait
          // would serialise every wgmma, C7515): P V and S_0, P V's wait,
          // this work tile's output staged (branch-free), S_0's wait, the
          // copies.
          turn_sync();
          WS_TRACE(5);
          wgmma_fence();
          issue_pv_tile(pa, v_smem + sp * T::kVTileBytes);
          wgmma_commit();
          issue_qk<T::kF16K, kBlockM, kBlockN, DK>(sacc, early_q, q_lo_wg, early_k, false);
          wgmma_commit();
          turn_pass();
          wgmma_wait<1>();  // P V done; S_0 of the next work tile runs under the staging
          fence_regs(o);
          fence_regs_u(pa);
          WS_TRACE(6);
          release(v_empty(sp));
          stage_rows();
          fence_proxy_async();
          __syncwarp();
          wgmma_wait<0>();
          fence_regs(sacc);
          release(k_empty(early_s));
          store_out_tma();
          store_lse();
        } else {
          turn_sync();
          WS_TRACE(5);
          wgmma_fence();
          issue_pv_tile(pa, v_smem + sp * T::kVTileBytes);
          wgmma_commit();
          turn_pass();
          wgmma_wait<0>();
          fence_regs(o);
          fence_regs_u(pa);
          WS_TRACE(6);
          release(v_empty(sp));
        }
      }
      count += k.num_tiles;
    };
    if (k.num_tiles > 0) {
      if (has_softcap && !PAGECHECK_WS_LEAN_SOFTCAP)
        run_tiles(std::true_type{});
      else
        run_tiles(std::false_type{});
    }
    pre = false;
    if (T::kEarlyS && early) {  // its output is on its way, the next work tile's S_0 in sacc
      WS_TRACE(7);  // (the trace's "epi": staging, S_0's wait, the copies)
      pre = true;
      ++item;
      continue;
    }
    if constexpr (!T::kEarlyS) ahead = fetch_work<kBlockM, kBlockN>(p, ahead.w + gridDim.x);
    // The output. 16-bit outputs go through shared memory: this
    // warpgroup's rows of the work tile's Q buffer (its S GEMMs are done;
    // each warp takes its own 16 rows, two 128-byte column halves per row as
    // Q has them, 16-byte chunks XOR-swizzled by row), then whole 256-byte
    // rows to global memory, 16 bytes per lane. Stored straight from the
    // accumulators, a warp's instruction wrote 16 bytes into each of 8 rows:
    // half of every 32-byte sector, 49% excess sectors by Nsight Compute at
    // 16 x 512 (where O is twice the K/V bytes). Other outputs: store2.
    if (!(T::kEarlyS && early)) row_stats();
    WS_TRACE_EPI(10);
    const DType odt = view.output_dtype;
    if (PAGECHECK_WS_LEAN_EPI || odt == DType::BF16 || odt == DType::F16) {
      finish_out_store();  // a work tile without key tiles came between
      stage_rows();
      // (A vote, so that ptxas knows the branch is uniform: with a divergent
      // one here, or a release by some warps alone, it serialised every
      // wgmma of the kernel, C7520.)
      if (PAGECHECK_WS_LEAN_EPI || __all_sync(0xffffffffu, p.o_tma && k.row0 + wg_row + 16 <= k.rows_total)) {
        // The warp's rows are whole tokens' groups of query heads: two
        // tensor copies (column halves) of 16 / group tokens from lane 0,
        // after every lane's proxy fence.
        fence_proxy_async();
        __syncwarp();
        WS_TRACE_EPI(11);
        store_out_tma();
        // One Q buffer (head dim 256): the producer needs it back before the
        // next work tile's Q, so the copies' reads are waited for here.
        if constexpr (T::kQBuffers == 1) finish_out_store();
        WS_TRACE_EPI(12);
        store_lse();
      } else {
        __syncwarp();
        // kOutLanes lanes a row (16 at head dim 128, 8 at 64), kOutStep rows
        // a step, 16 / kOutStep steps for the warp's 16 rows.
        constexpr int kOutLanes = T::DV * 2 / 16, kOutStep = 32 / kOutLanes, kOutSteps = 16 / kOutStep;
        uint4 v[kOutSteps];
#pragma unroll
        for (int i = 0; i < kOutSteps; ++i) {
          const int r = kOutStep * i + lane / kOutLanes, chunk = lane % kOutLanes;
          v[i] = ld_shared16(stage + (chunk >> 3) * (kBlockM * 128) + r * 128 + (((chunk & 7) ^ (r & 7)) << 4));
        }
        __syncwarp();
        WS_TRACE_EPI(11);
        // The next work tile's Q goes into these rows: by the producer's tensor
        // copy once q_empty completes (ordered after these generic accesses by
        // the proxy fence), or by this warpgroup's own loads (after the barrier).
        // The fence (MEMBAR.ALL.CTA in the SASS) waits for this thread's
        // outstanding memory operations, so the rows are read into registers,
        // the buffer released, and then stored: with the global stores before
        // the fence, the epilogue took 4400 cycles per work tile (clock stamps,
        // H100); in this order, with the next work tile's loads ahead and the
        // division-free rows, 3800 (H200; docs/performance.md, session 7).
        fence_proxy_async();
        if (!p.q_tma) named_sync(kQBar + wg, 128);
        if (p.q_tma) release(q_empty(q_buf));  // this warpgroup is done with the Q buffer
        WS_TRACE_EPI(12);
        // Row kOutStep i + lane / kOutLanes of this warp is token tok, query
        // head kv_head * group + rem: one division for the first row, then
        // steps of kOutStep rows (a division per row cost ~45 instructions
        // with a reciprocal).
        char* out = static_cast<char*>(view.output) + (lane % kOutLanes) * 16;
        const int row_first = k.row0 + wg_row + lane / kOutLanes;
        int tok = static_cast<int>(fast_div(static_cast<std::uint32_t>(row_first), p.div_group));
        int rem = row_first - tok * group;
#pragma unroll
        for (int i = 0; i < kOutSteps; ++i) {
          if (i > 0) {
            rem += kOutStep;
#pragma unroll
            for (int s = 0; s < kOutStep; ++s)  // a group smaller than the step takes several
              if (rem >= group) rem -= group, ++tok;
          }
          if (row_first + kOutStep * i < k.rows_total) {
            const std::int64_t o_row = (k.q_begin + tok) * view.q_heads + k.kv_head * group + rem;
            *reinterpret_cast<uint4*>(out + o_row * (T::DV * 2)) = v[i];
          }
        }
        store_lse();
      }
    } else {
      // F32 outputs (the output has the query's dtype: F32, F16 or BF16, as
      // case_file.cpp and synthetic.cpp check), straight from the
      // accumulators. A float2 store instead of store2's three-way switch:
      // this cold path sits inside the hot epilogue's code (ptxas lays it
      // out there whatever the branch order or hints, scripts/sass_layout.py),
      // and the switch tripled it.
      float* const out_f32 = static_cast<float*>(view.output);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = k.row0 + wg_row + g + 8 * h;
        if (row >= k.rows_total) continue;
        const std::int64_t token = k.q_begin + row / group;
        const int head = k.kv_head * group + row % group;
        float* const out_row = out_f32 + (token * view.q_heads + head) * T::DV + 2 * t;
#pragma unroll
        for (int d = 0; d < kDBlocks; ++d)
          *reinterpret_cast<float2*>(out_row + d * 8) = make_float2(o[d * 4 + 2 * h] * inv[h], o[d * 4 + 2 * h + 1] * inv[h]);
      }
      store_lse();
      if (p.q_tma) release(q_empty(q_buf));  // this warpgroup is done with the Q buffer
    }
    WS_TRACE(7);
#if PAGECHECK_WS_TRACE == 3
    WS_TRACE_AT(15, 3);
#endif
#if PAGECHECK_WS_TRACE == 2
#pragma unroll
    for (int i = 0; i < 5; ++i) WS_TRACE_AT(10 + i, loop_sum[i]);
#endif
    ++item;
  }
  finish_out_store();
  if (p.o_tma && lane == 0) bulk_wait_all();  // the last output copies are done before the CTA exits
  if (wg == 0) turn_sync();  // the last warpgroup's last pass
#endif  // PAGECHECK_SM90A_DEVICE
}

// ---- launcher -------------------------------------------------------------------

// Persistent grid: one CTA per SM (or per work tile, if fewer), each
// taking work tiles blockIdx.x, blockIdx.x + gridDim.x, ... (heaviest
// first, so the static round robin keeps the SMs' loads close).
int sm_count() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    return 132;
  }
  return count;
}

int l2_bytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess || bytes <= 0) {
    (void)cudaGetLastError();
    return 50 << 20;
  }
  return bytes;
}

// A 3-D map of 16-bit elements over (dim, query head, token) rows of `dim`
// (128 or 64) dims (the query, or an output of its shape), boxes of 64 dims
// x `group` heads x `box_tokens` tokens, 128-byte swizzle (the Q buffer's
// layout).
bool make_token_rows_map(CUtensorMap& map, bool f16, void* base, int dim, std::int64_t q_heads,
                         std::int64_t num_tokens, int group, int box_tokens, CUtensorMapL2promotion promotion) {
  EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(q_heads),
                              static_cast<cuuint64_t>(num_tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(dim) * 2, static_cast<cuuint64_t>(q_heads) * dim * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(group), static_cast<cuuint32_t>(box_tokens)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode(&map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides,
                box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class T>
Status launch_ws(const AttnParams& a, cudaStream_t stream) {
  WsParams p{};
  p.a = a;
  const DeviceCaseView& view = a.view;
  // make_params splits an F16 query over BF16 operands; an FP8 cache here
  // may have F16 ones for Q K^T (WsTraits::kF16K), which hold it whole.
  if constexpr (T::kFp8) p.a.split_query = view.query_dtype == DType::F32 || (view.query_dtype == DType::F16 && !T::kF16K);
  if constexpr (T::kFp8K) p.a.split_query = 0;  // the consumers split the query into its E4M3 parts
  const std::int64_t rows = static_cast<std::int64_t>(view.max_q_len) * a.group;
  p.a.tiles_per_seq = static_cast<std::int32_t>((rows + T::kBlockM - 1) / T::kBlockM);
  if (static_cast<std::int64_t>(p.a.tiles_per_seq) * view.kv.num_seqs * view.kv.kv_heads == 0) return {};  // no work
  p.div_group = fast_divisor(static_cast<std::uint32_t>(a.group));
  if constexpr (T::CONTIG) {
    p.box_rows = T::kBlockN;
    p.head_inner = 1;
    const std::int64_t h = view.kv.kv_heads;
    PC_TRY(make_kv_map(p.key_map, T::kF16K, a.contig_key, T::DK, a.contig_capacity, h, view.kv.num_seqs, h * T::DK,
                       T::DK, a.contig_capacity * h * T::DK, p.box_rows, true));
    PC_TRY(make_kv_map(p.value_map, T::kF16V, a.contig_value, T::DV, a.contig_capacity, h, view.kv.num_seqs, h * T::DV,
                       T::DV, a.contig_capacity * h * T::DV, p.box_rows, true));
  } else if constexpr (T::kTma) {
    p.box_rows = view.kv.block_size < T::kBlockN ? view.kv.block_size : T::kBlockN;
    const CacheStrides& ks = view.kv.key_strides;
    const CacheStrides& vs = view.kv.value_strides;
    // K and V share one order (the kernel has one flag): head inner when
    // both caches step heads faster than slots (NHD).
    p.head_inner = ks.head < ks.slot && vs.head < vs.slot;
    if (!p.head_inner && (ks.head < ks.slot || vs.head < vs.slot))
      return invalid_input("key and value caches with different layouts are not built for the tensor-copy kernel");
    PC_TRY(make_kv_map(p.key_map, T::kF16K, view.kv.key_data, T::DK, view.kv.block_size, view.kv.kv_heads,
                       view.kv.num_blocks, ks.slot, ks.head, ks.block, p.box_rows, p.head_inner));
    PC_TRY(make_kv_map(p.value_map, T::kF16V, view.kv.value_data, T::DV, view.kv.block_size, view.kv.kv_heads,
                       view.kv.num_blocks, vs.slot, vs.head, vs.block, p.box_rows, p.head_inner));
  }
  p.boxes_per_tile = p.box_rows > 0 ? T::kBlockN / p.box_rows : 0;
  if constexpr (!T::kTma) {
    // 16-byte units; sm90_ws_supports keeps every row start of these caches
    // under 2^32 units (and the strides multiples of 8 elements).
    const CacheStrides* st[2] = {&view.kv.key_strides, &view.kv.value_strides};
    constexpr int kPerUnit = 16 / T::kElemBytes;  // elements per 16 bytes
    for (int i = 0; i < 2; ++i) {
      p.row_block[i] = static_cast<std::uint32_t>(st[i]->block / kPerUnit);
      p.row_slot[i] = static_cast<std::uint32_t>(st[i]->slot / kPerUnit);
      p.row_head[i] = static_cast<std::uint32_t>(st[i]->head / kPerUnit);
    }
  }
  // Sections of pairs whose K/V (at capacity) take at most half of L2.
  {
    const std::int64_t pairs = view.kv.num_seqs * view.kv.kv_heads;
    const std::int64_t capacity = T::CONTIG ? a.contig_capacity : view.max_seq_len;
    const std::int64_t pair_bytes = capacity * (T::DK + T::DV) * 2;
    // H200, 8 x 2048 (64 pairs of 1 MB): fmha 486 TFLOP/s in sections of
    // 25 pairs against 457 in one section (heaviest first over all pairs).
    // And at most the pairs whose work tiles fill PAGECHECK_WS_SECTION_WAVES
    // waves (4; session 22), so that the first wave reads the K/V of fewer
    // pairs at once: 16 x 512 on 132 SMs takes 33 pairs instead of 100
    // (+6.5%), 8 x 2048 9 instead of 25 (+2.8%); never below one pair per
    // 22 CTAs, which keeps 1 x 8192 at 6 (work_order.hpp, section_pairs).
    std::int64_t per_section = section_pairs(pairs, pair_bytes, l2_bytes(), p.a.tiles_per_seq, sm_count(),
                                             PAGECHECK_WS_SECTION_WAVES);
#if PAGECHECK_WS_SECTION_ENV
    // Developer knob (session 21): PAGECHECK_WS_SECTION_PAIRS=N sections
    // of N pairs, to time how much K/V the first wave of work tiles reads.
    if (const char* e = std::getenv("PAGECHECK_WS_SECTION_PAIRS")) {
      const long long v = std::strtoll(e, nullptr, 10);
      if (v > 0) per_section = v;
    }
#endif
    p.order = make_work_order(view.kv.num_seqs, view.kv.kv_heads, p.a.tiles_per_seq, per_section);
  }
  {
    const DType operand = T::kF16K ? DType::F16 : DType::BF16;
    const int group = a.group;
    // FP8-K: the consumers make Q's E4M3 parts, from the query in global
    // memory, or (PAGECHECK_WS_FP8K_QTMA, BF16 queries) from the tile the
    // producer's tensor copy brings a work tile ahead.
    p.q_tma = (!T::kFp8K || PAGECHECK_WS_FP8K_QTMA) && !p.a.split_query && view.query_dtype == operand && group >= 1 &&
              group <= T::kBlockM &&
              T::kBlockM % group == 0 && view.num_tokens > 0 && view.num_tokens <= INT_MAX;
    if (p.q_tma && !make_token_rows_map(p.query_map, T::kF16K, const_cast<void*>(view.query), T::DK, view.q_heads,
                                        view.num_tokens, group, T::kBlockM / group, CU_TENSOR_MAP_L2_PROMOTION_L2_256B))
      p.q_tma = 0;  // the consumers load it
    // The output by tensor copies (o_tma): 16-bit, in rows of the query's
    // shape (tokens x query heads x DV), from the Q buffers the producer
    // fills, whole tokens' groups in a warp's 16 rows.
    const bool out16 = view.output_dtype == DType::BF16 || view.output_dtype == DType::F16;
    p.o_tma = !T::kFp8K && p.q_tma && out16 && 16 % group == 0 && sm90_ws_out_tma_enabled() &&
              reinterpret_cast<std::uintptr_t>(view.output) % 16 == 0;
    if (p.o_tma && !make_token_rows_map(p.out_map, view.output_dtype == DType::F16, view.output, T::DV, view.q_heads,
                                        view.num_tokens, group, 16 / group, CU_TENSOR_MAP_L2_PROMOTION_NONE))
      p.o_tma = 0;  // the consumers store it
  }
  const std::int64_t ctas = p.order.num_work < sm_count() ? p.order.num_work : sm_count();
  const int smem = T::kSmemBytes;
  void (*kernel)(WsParams) = attn_ws_kernel<T>;
  if constexpr (T::kOwnSoftcapKernel) {
    if (p.a.softcap_out != 0.f) kernel = attn_ws_kernel<T, true>;
  }
  CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
#if PAGECHECK_WS_TRACE
  void* trace = nullptr;
  CUDA_TRY(cudaGetSymbolAddress(&trace, g_ws_trace));
  CUDA_TRY(cudaMemsetAsync(trace, 0, sizeof(g_ws_trace), stream));
#if PAGECHECK_WS_TRACE == 4
  void* timeline = nullptr;
  CUDA_TRY(cudaGetSymbolAddress(&timeline, g_ws_timeline));
  CUDA_TRY(cudaMemsetAsync(timeline, 0, sizeof(g_ws_timeline), stream));
#endif
#endif
  kernel<<<static_cast<unsigned>(ctas), T::kThreads, smem, stream>>>(p);
  CUDA_TRY_LAUNCH();
#if PAGECHECK_WS_TRACE
  // Each launch rewrites FILE.prefill (paged) or FILE.fmha: one line per
  // stamped work tile, "cta warpgroup item" and the ten slots.
  if (const char* file = std::getenv("WS_TRACE")) {
    std::vector<unsigned long long> h(sizeof(g_ws_trace) / 8);
    CUDA_TRY(cudaStreamSynchronize(stream));
    CUDA_TRY(cudaMemcpy(h.data(), trace, sizeof(g_ws_trace), cudaMemcpyDeviceToHost));
    const std::string path = std::string(file) + (T::CONTIG ? ".fmha" : ".prefill");
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      for (std::int64_t c = 0; c < ctas && c < 160; ++c)
        for (int wg = 0; wg < 2; ++wg)
          for (int it = 0; it < 64; ++it) {
            const unsigned long long* r = &h[((c * 2 + wg) * 64 + it) * kTraceSlots];
            if (r[0] == 0) continue;
            std::fprintf(f, "%lld %d %d", static_cast<long long>(c), wg, it);
            for (int i = 0; i < kTraceSlots; ++i) std::fprintf(f, " %llu", r[i]);
            std::fprintf(f, "\n");
          }
      std::fclose(f);
    }
#if PAGECHECK_WS_TRACE == 4
    std::vector<unsigned long long> tl(sizeof(g_ws_timeline) / 8);
    void* tl_dev = nullptr;
    CUDA_TRY(cudaGetSymbolAddress(&tl_dev, g_ws_timeline));
    CUDA_TRY(cudaMemcpy(tl.data(), tl_dev, sizeof(g_ws_timeline), cudaMemcpyDeviceToHost));
    const std::string tl_path = std::string(file) + (T::CONTIG ? ".timeline.fmha" : ".timeline.prefill");
    if (FILE* f = std::fopen(tl_path.c_str(), "w")) {
      for (int c = 0; c < 2; ++c)
        for (int wg = 0; wg < 2; ++wg)
          for (int i = 0; i < kTimelineTiles; ++i) {
            const unsigned long long* e = &tl[((c * 2 + wg) * kTimelineTiles + i) * 6];
            if (e[0] == 0) break;
            std::fprintf(f, "%d %d %d %llu %llu %llu %llu %llu %llu\n", c, wg, i, e[0], e[1], e[2], e[3], e[4], e[5]);
          }
      std::fclose(f);
    }
#endif
  }
#endif
  return {};
}

}  // namespace

// Whether environment variable `name` is set to exactly `value` (the
// developer knobs below, each read once).
static bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// Tensor copies of whole pages of 32 slots and up (4 boxes per tile at
// most); other page sizes take the row producer. H100, one call, prefill
// TFLOP/s (docs/performance.md, session 4): the row producer 397-399 at
// every page size at 8 x 2048, block 16 as 8 boxes 366-368, block 64 as 2
// boxes 473-476; at block 16 the rows also win at 1 x 8192 (463 / 413) and
// chunked (465 / 410) and tie at 16 x 512 (229). Session 19, the kernel at
// 515 TFLOP/s: block 16 as 8 boxes 391 against rows' 515 at 8 x 2048 (-24%),
// block 64 as rows 514 against boxes' 526. PAGECHECK_WS_TMA_MIN=N (a
// developer knob, read once) moves the threshold for such comparisons.
// FP8 caches always take the row producer (it widens them to BF16).
bool sm90_ws_uses_tma(int block_size, DType kv_dtype) {
  static const int min_block = [] {
    const char* v = std::getenv("PAGECHECK_WS_TMA_MIN");
    return v != nullptr ? std::atoi(v) : 32;
  }();
  if (kv_dtype == DType::F8_E4M3 || kv_dtype == DType::F8_E5M2) return false;
  return block_size >= min_block && block_size >= 8 && (block_size & (block_size - 1)) == 0;
}

// FP8 caches take this kernel (its row producer stages raw tiles by
// cp.async a tile ahead and widens them to F16): on the H100 in session 12
// the staged producer (then widening to BF16) beat attn_sm90.cu's kernel at
// 8 x 2048 (355 against 306 TFLOP/s), 16 x 512 (242 / 164) and chunked
// (394 / 374), and lost at 1 x 8192 (390 / 418). PAGECHECK_WS_FP8=0 (a
// developer knob, read once) sends FP8 caches to attn_sm90.cu's kernel.
bool sm90_ws_fp8_enabled() {
  static const bool on = !env_is("PAGECHECK_WS_FP8", "0");
  return on;
}

// The output by tensor copies (WsParams::o_tma) unless
// PAGECHECK_WS_OUT_TMA=0 (a developer knob, read once, for comparisons).
bool sm90_ws_out_tma_enabled() {
  static const bool on = !env_is("PAGECHECK_WS_OUT_TMA", "0");
  return on;
}

// FP8-K (WsTraits::kFp8K) for FP8 caches whose longest sequence holds
// 512 keys or more where the query is BF16 and a query group divides the
// 128-row work tile (its tile by tensor copy, PAGECHECK_WS_FP8K_QTMA),
// 1280 for other queries (loaded and split at
// each work tile's start); PAGECHECK_WS_FP8_K_MIN_KEYS=N (a developer
// knob, read once) sets one threshold for both: 0 takes it for every FP8
// case, a huge value never. The staged kernel below that: the consumers'
// query split costs each work tile its prologue, which short sequences
// (few key tiles a work tile under the causal mask) do not repay. H100,
// session 17, E4M3 causal prefill of 4096 tokens, FP8-K with the query
// from global memory against staged (TFLOP/s): 178.0 / 218.0 at 512 keys a
// sequence, 225.7 / 243.9 at 768, 273.5 / 292.7 at 1024, 323.2 / 298.9 at
// 1536, 369.5 / 326.3 at 2048. Session 18, the query by tensor copy: 251-253
// against 228-229 at 16 x 512 (512 keys); shorter sequences not measured.
bool sm90_ws_fp8_k(const DeviceCaseView& view) {
  static const long env_keys = [] {
    const char* v = std::getenv("PAGECHECK_WS_FP8_K_MIN_KEYS");
    return v != nullptr ? std::atol(v) : -1L;
  }();
  const int group = view.kv.kv_heads > 0 ? view.q_heads / static_cast<int>(view.kv.kv_heads) : 0;
  const bool q_copy = PAGECHECK_WS_FP8K_QTMA != 0 && view.query_dtype == DType::BF16 && group >= 1 && 128 % group == 0;
  const long min_keys = env_keys >= 0 ? env_keys : (q_copy ? 512L : 1280L);
  return PAGECHECK_WS_FP8_K != 0 && view.max_seq_len >= min_keys;
}

// ---- dispatch -----------------------------------------------------------------

// Head dim 256 on this kernel unless PAGECHECK_WS_D256=0 (a developer knob,
// read once, for comparisons with mma.sync).
bool sm90_ws_d256_enabled() {
  static const bool on = !env_is("PAGECHECK_WS_D256", "0");
  return on;
}

bool sm90_ws_supports(const DeviceCaseView& view, bool contiguous) {
  static const bool forced_v3 = env_is("PAGECHECK_ATTN_KERNEL", "wgmma");
  if (forced_v3) return false;
  // Head dim 128; head dim 64 for 16-bit paged caches (fmha's gather is
  // built for 128 only, FP8 widening for 128 rows).
  const bool d128 = view.kv.head_dim == 128 && view.kv.v_head_dim == 128;
  const bool d64 = view.kv.head_dim == 64 && view.kv.v_head_dim == 64;
  const bool paged16 = !contiguous && (view.kv_dtype == DType::BF16 || view.kv_dtype == DType::F16);
  // Head dim 256: 16-bit pages, a query in the operand type (one Q buffer:
  // no split query).
  const bool d256 = view.kv.head_dim == 256 && view.kv.v_head_dim == 256 && paged16 && sm90_ws_d256_enabled() &&
                    view.query_dtype == view.kv_dtype;
  if (!d128 && !(d64 && paged16) && !d256) return false;
  // A driver without the tensor-map encoder: attn_sm90.cu's kernel instead.
  if (encode_tiled() == nullptr) return false;
  const bool fp8 = view.kv_dtype == DType::F8_E4M3 || view.kv_dtype == DType::F8_E5M2;
  if (view.kv_dtype != DType::BF16 && view.kv_dtype != DType::F16 && !(fp8 && sm90_ws_fp8_enabled())) return false;
  if (contiguous) return view.kv_dtype == DType::BF16;
  // Rows of 16-byte chunks (and tensor-map strides in multiples of 16 bytes).
  const std::int64_t per_unit = fp8 ? 16 : 8;  // elements per 16 bytes
  for (const CacheStrides* st : {&view.kv.key_strides, &view.kv.value_strides})
    if (st->slot % per_unit != 0 || st->head % per_unit != 0 || st->block % per_unit != 0 || st->slot <= 0 ||
        st->head < 0 || st->block <= 0)
      return false;
  if (view.kv.num_blocks <= 0 || view.kv.num_blocks > INT_MAX) return false;
  // The row producer counts a row's start in 16-byte units in 32 bits:
  // caches under 64 GiB; larger ones take attn_sm90.cu's kernel.
  if (!sm90_ws_uses_tma(view.kv.block_size, view.kv_dtype)) {
    for (const CacheStrides* st : {&view.kv.key_strides, &view.kv.value_strides}) {
      const std::int64_t last_row = (view.kv.num_blocks - 1) * st->block + (view.kv.block_size - 1) * st->slot +
                                    (view.kv.kv_heads - 1) * st->head;
      if (last_row / per_unit >= 0xFFFFFFFFll) return false;
    }
  }
  return true;
}

Status launch_attn_sm90_ws(AttnParams p, bool contiguous, cudaStream_t stream) {
  const bool tma = sm90_ws_uses_tma(p.view.kv.block_size, p.view.kv_dtype);
  if (contiguous) {
    if (p.view.kv_dtype == DType::BF16) return launch_ws<WsTraits<KvKind::BF16, KvSource::Contiguous>>(p, stream);
  } else if (p.view.kv.head_dim == 256) {
    if (p.view.kv_dtype == DType::BF16)
      return tma ? launch_ws<WsTraits<KvKind::BF16, KvSource::PagedTma, 256>>(p, stream)
                 : launch_ws<WsTraits<KvKind::BF16, KvSource::PagedRows, 256>>(p, stream);
    if (p.view.kv_dtype == DType::F16)
      return tma ? launch_ws<WsTraits<KvKind::F16, KvSource::PagedTma, 256>>(p, stream)
                 : launch_ws<WsTraits<KvKind::F16, KvSource::PagedRows, 256>>(p, stream);
  } else if (p.view.kv.head_dim == 64) {
    switch (p.view.kv_dtype) {
      case DType::BF16:
        return tma ? launch_ws<WsTraits<KvKind::BF16, KvSource::PagedTma, 64>>(p, stream)
                   : launch_ws<WsTraits<KvKind::BF16, KvSource::PagedRows, 64>>(p, stream);
      case DType::F16:
        return tma ? launch_ws<WsTraits<KvKind::F16, KvSource::PagedTma, 64>>(p, stream)
                   : launch_ws<WsTraits<KvKind::F16, KvSource::PagedRows, 64>>(p, stream);
      default: break;
    }
  } else {
    switch (p.view.kv_dtype) {
      case DType::BF16:
        return tma ? launch_ws<WsTraits<KvKind::BF16, KvSource::PagedTma>>(p, stream)
                   : launch_ws<WsTraits<KvKind::BF16, KvSource::PagedRows>>(p, stream);
      case DType::F16:
        return tma ? launch_ws<WsTraits<KvKind::F16, KvSource::PagedTma>>(p, stream)
                   : launch_ws<WsTraits<KvKind::F16, KvSource::PagedRows>>(p, stream);
      case DType::F8_E4M3:
        return sm90_ws_fp8_k(p.view) ? launch_ws<WsTraits<KvKind::E4M3, KvSource::PagedRows, 128, true>>(p, stream)
                                     : launch_ws<WsTraits<KvKind::E4M3, KvSource::PagedRows>>(p, stream);
      case DType::F8_E5M2:
        return sm90_ws_fp8_k(p.view) ? launch_ws<WsTraits<KvKind::E5M2, KvSource::PagedRows, 128, true>>(p, stream)
                                     : launch_ws<WsTraits<KvKind::E5M2, KvSource::PagedRows>>(p, stream);
      default: break;
    }
  }
  return invalid_input("the warp-specialised sm_90a kernel is not built for kv dtype " +
                       std::string(dtype_name(p.view.kv_dtype)) + (contiguous ? " (contiguous)" : " (paged)"));
}

}  // namespace pagecheck::gpu::attn
