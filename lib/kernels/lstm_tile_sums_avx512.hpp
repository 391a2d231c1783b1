#pragma once
// The multiply-add loop of a fused LSTM tile (kernels/recurrent_step_arch.hpp, lstm_tile) on
// AVX-512 with f32, written out as assembly: R rows (1 to 6) by the four vectors of a gate panel
// row, all 24 sums in zmm0-23, the panel row in zmm24-27 and the broadcasts in zmm28-31.
//
// Why by hand: the loop is all of an LSTM(512) forward's time that matters (taking the cell out
// of the tile changed nothing measurable), and GCC's code for the same loop kept 6 row pointers
// to advance, rotated sums through other registers and spilled two to the stack. In a standalone
// program on the Xeon (one core, 6 x 4 tiles over 16 panels of 640 rows, 2.5 MiB, as a core's
// share of an LSTM(512) step) GCC's loop ran 152-165 GFLOP/s and this one 171-176; with the
// panel in L1, 168-170 against 183-186, where 24 independent FMA chains reach 207-212. In the
// layer the gain was smaller: an LSTM(512) forward about 1% faster on two threads. The rows are
// read through two base pointers and the row stride (rows 0-2 from a, 3-5 from a + 3 ld), so a
// step of k advances three registers, not seven.
//
// The order of the sums is the one panel_sums has (each sum in order of k, one fused multiply-add
// per term), so the bits are the same.
//
// Included only by recurrent_step_arch.hpp; defined only where the translation unit is built for
// AVX-512 (elementwise_avx512.cpp), like everything there in an anonymous namespace.

#include <cstdint>

#if defined(__x86_64__) && defined(__AVX512F__)

// The assembly reads best one instruction a line, as written.
// clang-format off
// Four fused multiply-adds of the panel row (zmm24-27) by broadcast register B into sums S0-S3.
#define KILN_ZMM4_FMAS(B, S0, S1, S2, S3)               \
  "vfmadd231ps %%zmm24, %%zmm" #B ", %%zmm" #S0 "\n\t" \
  "vfmadd231ps %%zmm25, %%zmm" #B ", %%zmm" #S1 "\n\t" \
  "vfmadd231ps %%zmm26, %%zmm" #B ", %%zmm" #S2 "\n\t" \
  "vfmadd231ps %%zmm27, %%zmm" #B ", %%zmm" #S3 "\n\t"

// Tile row R's element at ADDR broadcast into register B and multiplied into its four sums
// (KILN_ZMM4_FMAS), when the tile has more than R rows (row 0 always: written out below).
#define KILN_ZMM4_ROW_STEP(R, ADDR, B, S0, S1, S2, S3)\
  ".if %c[rows] > " #R "\n\t"                         \
  "vbroadcastss " ADDR ", %%zmm" #B "\n\t"            \
  KILN_ZMM4_FMAS(B, S0, S1, S2, S3)                   \
  ".endif\n\t"

// One row of k: the panel row at byte OB from %[b], then each tile row's element at byte OA from
// its row start (rows 0-2 from %[a], 3-5 from %[a3], %[ld] bytes apart).
#define KILN_ZMM4_STEP(OB, OA)                                             \
  "vmovups " #OB "(%[b]), %%zmm24\n\t"                                     \
  "vmovups " #OB "+64(%[b]), %%zmm25\n\t"                                  \
  "vmovups " #OB "+128(%[b]), %%zmm26\n\t"                                 \
  "vmovups " #OB "+192(%[b]), %%zmm27\n\t"                                 \
  "vbroadcastss " #OA "(%[a]), %%zmm28\n\t"                                \
  KILN_ZMM4_FMAS(28, 0, 1, 2, 3)                                           \
  KILN_ZMM4_ROW_STEP(1, #OA "(%[a], %[ld])", 29, 4, 5, 6, 7)               \
  KILN_ZMM4_ROW_STEP(2, #OA "(%[a], %[ld], 2)", 30, 8, 9, 10, 11)          \
  KILN_ZMM4_ROW_STEP(3, #OA "(%[a3])", 31, 12, 13, 14, 15)                 \
  KILN_ZMM4_ROW_STEP(4, #OA "(%[a3], %[ld])", 28, 16, 17, 18, 19)          \
  KILN_ZMM4_ROW_STEP(5, #OA "(%[a3], %[ld], 2)", 29, 20, 21, 22, 23)

// Tile row R's four sums, at byte 256 R of %[acc], moved to or from zmm 4R to 4R + 3 by MOVE
// (KILN_ZMM_LOAD or KILN_ZMM_SAVE, of an address and a register number); rows past %c[rows]
// left out. KILN_ZMM4_TILE moves all six.
#define KILN_ZMM_LOAD(M, Z) "vmovups " M ", %%zmm" #Z "\n\t"
#define KILN_ZMM_SAVE(M, Z) "vmovups %%zmm" #Z ", " M "\n\t"
#define KILN_ZMM4_ROW(MOVE, R, Z0, Z1, Z2, Z3) \
  ".if %c[rows] > " #R "\n\t"                 \
  MOVE(#R "*256(%[acc])", Z0)                 \
  MOVE(#R "*256+64(%[acc])", Z1)              \
  MOVE(#R "*256+128(%[acc])", Z2)             \
  MOVE(#R "*256+192(%[acc])", Z3)             \
  ".endif\n\t"
#define KILN_ZMM4_TILE(MOVE)             \
  KILN_ZMM4_ROW(MOVE, 0, 0, 1, 2, 3)     \
  KILN_ZMM4_ROW(MOVE, 1, 4, 5, 6, 7)     \
  KILN_ZMM4_ROW(MOVE, 2, 8, 9, 10, 11)   \
  KILN_ZMM4_ROW(MOVE, 3, 12, 13, 14, 15) \
  KILN_ZMM4_ROW(MOVE, 4, 16, 17, 18, 19) \
  KILN_ZMM4_ROW(MOVE, 5, 20, 21, 22, 23)
// clang-format on

namespace kiln::detail {

namespace {

/// sums [R][4][16] += for p < k, a[r][p] times the panel's row p (4 vectors of 16, rows 256
/// bytes apart), r < R; a's rows are ld_bytes apart. Every 4 rows of k, the two lines at ask are
/// asked for into L2 and ask advanced by 128 while it is below ask_end. (panel_sums asks for one
/// line: its panels of 2 vectors are covered so. A fused LSTM(512) panel is 2,560 lines, and its
/// 11 tiles of 640 rows of k have 1,760 steps of 4 between them: one line each left 31% of the
/// next panel to come from the last-level cache when its tiles reached it; two lines each made
/// the forward about 1% faster, 26.4-27.0 ms against 26.5-27.9 in six alternating pairs.)
template <int R>
[[gnu::always_inline]] inline void lstm_tile_sums_avx512(float* sums, const float* a,
                                                         std::int64_t ld_bytes, const float* panel,
                                                         std::int64_t k, std::uintptr_t& ask,
                                                         std::uintptr_t ask_end) {
  static_assert(R >= 1 && R <= 6, "a fused LSTM tile has 1 to 6 rows");
  const char* a3 = nullptr;    // set in the assembly: a + 3 ld_bytes (rows 3 to 5)
  std::int64_t fours = k / 4;  // steps of 4 rows of k
  std::int64_t rest = k % 4;   // then one row at a time
  // clang-format off
  asm volatile(
      KILN_ZMM4_TILE(KILN_ZMM_LOAD)
      "lea (%[ld], %[ld], 2), %[a3]\n\t"
      "add %[a], %[a3]\n\t"
      "test %[fours], %[fours]\n\t"
      "jz 3f\n\t"
      "1:\n\t"                          // 4 rows of k a pass
      "cmp %[ask_end], %[ask]\n\t"
      "jae 2f\n\t"
      "prefetcht1 (%[ask])\n\t"
      "prefetcht1 64(%[ask])\n\t"
      "add $128, %[ask]\n\t"
      "2:\n\t"
      KILN_ZMM4_STEP(0, 0)
      KILN_ZMM4_STEP(256, 4)
      KILN_ZMM4_STEP(512, 8)
      KILN_ZMM4_STEP(768, 12)
      "add $1024, %[b]\n\t"
      "add $16, %[a]\n\t"
      "add $16, %[a3]\n\t"
      "dec %[fours]\n\t"
      "jnz 1b\n\t"
      "3:\n\t"
      "test %[rest], %[rest]\n\t"
      "jz 5f\n\t"
      "4:\n\t"                          // the rest, a row of k a pass
      KILN_ZMM4_STEP(0, 0)
      "add $256, %[b]\n\t"
      "add $4, %[a]\n\t"
      "add $4, %[a3]\n\t"
      "dec %[rest]\n\t"
      "jnz 4b\n\t"
      "5:\n\t"
      KILN_ZMM4_TILE(KILN_ZMM_SAVE)
      : [a] "+r"(a), [a3] "=&r"(a3), [b] "+r"(panel), [fours] "+r"(fours), [rest] "+r"(rest),
        [ask] "+r"(ask)
      : [acc] "r"(sums), [ld] "r"(ld_bytes), [ask_end] "r"(ask_end), [rows] "i"(R)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
        "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28",
        "xmm29", "xmm30", "xmm31");
  // clang-format on
}

}  // namespace

}  // namespace kiln::detail

#undef KILN_ZMM4_FMAS
#undef KILN_ZMM4_STEP
#undef KILN_ZMM4_ROW_STEP
#undef KILN_ZMM_LOAD
#undef KILN_ZMM_SAVE
#undef KILN_ZMM4_ROW
#undef KILN_ZMM4_TILE

#endif
