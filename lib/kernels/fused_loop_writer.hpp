#pragma once
// The code generator for fused elementwise loops (kernels/fused_loop.hpp), included only by
// kernels/fused_loop.cpp (everything but the shared structs is in an anonymous namespace). Each
// function it writes is
//
//   void loop(const char* const* inputs, char* out, std::int64_t rows, const std::int64_t* walk)
//
// over `rows` rows of walk[0] floats: inputs[k] is input k at the first element (a register
// input's value), out the output there; walk[1] and walk[2 + k] step the output and input k
// from row to row (a flat run is one row). An input held in a register is broadcast at the
// start of each row; a flat input is read at [base + offset] in the instruction that needs it.
// Values live in vector registers from the instruction that makes them to their last reader:
// 16 ymm registers for the AVX2 row kernels' level, 32 zmm registers for AVX-512's.
//
// Bit compatibility with the row kernels is by construction: each instruction below is the
// sequence of the xsimd 8.1 code behind its row kernel (operand order included, since x86 min
// and max return their second operand for NaN and equal values), and a row's last few elements
// run the same code on masked loads, whose other lanes read as zero, as the row kernels'
// zero-padded tails do. Each lane's result is a function of that lane's inputs alone, made of
// IEEE-rounded operations (add, mul, div, sqrt, fma, round to nearest, the comparisons) and of
// bit operations, the same at both widths; where AVX-512F has no form of an AVX2 instruction
// (a comparison into a vector, vblendvps, vandps on zmm without AVX-512DQ) the zmm code gets
// the same bits another way: lane masks in k registers, vpternlogd, vpandd and vpxord.

#include <xbyak/xbyak.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/elementwise_table.hpp"
#include "kernels/fused.hpp"

namespace kiln::detail {

/// A generated function: rows rows of walk[0] elements; walk[1] is the output's row step in
/// bytes, walk[2 + k] input k's (see LoopWriter::write_function).
using LoopFn = void (*)(const char* const* inputs, char* out, std::int64_t rows,
                        const std::int64_t* walk);

/// The code written for one program and one choice of which inputs are held in registers,
/// shared by every layout (and every plan) that needs the same: see LoopCodeCache.
struct LoopCode {
  std::int64_t width = 8;  // floats per vector: 8 (ymm, AVX2) or 16 (zmm, AVX-512)
  /// How far ahead (bytes of each stream) the vector loop asks for its flat inputs and outputs;
  /// 0: it does not (see loop_prefetch_bytes).
  std::int64_t ahead = 0;
  /// Owns the executable memory; nothing else of the writer (whose references to the program
  /// and layout it was written for are not kept valid) is used once the code is ready.
  std::unique_ptr<Xbyak::CodeGenerator> writer;
  LoopFn plain = nullptr;     // vmovups stores
  LoopFn streamed = nullptr;  // vmovntps stores (output aligned to a vector); for streamed layouts
};

struct FusedLoop {
  std::shared_ptr<const LoopCode> code;
  std::size_t num_inputs = 0;
  /// Input k is one value per call (a broadcast input, or one element per row of a matrix),
  /// held in a register; otherwise it is read with the output's element stride.
  std::array<bool, max_fused_pointers> scalar{};
  /// A matrix walked row by row (an input broadcast along one of its dims): input k's row at
  /// row_step[k] bytes from the last. Otherwise one flat run of elements.
  bool by_rows = false;
  std::int64_t num_rows = 1;
  std::int64_t row_length = 0;
  std::array<std::int64_t, max_fused_pointers> row_step{};
};

namespace {

// Comparison predicates of vcmpps, as xsimd's AVX operators use them.
constexpr std::uint8_t cmp_lt = 0x11;     // _CMP_LT_OQ
constexpr std::uint8_t cmp_le = 0x12;     // _CMP_LE_OQ
constexpr std::uint8_t cmp_ge = 0x1D;     // _CMP_GE_OQ
constexpr std::uint8_t cmp_unord = 0x03;  // _CMP_UNORD_Q
constexpr std::uint8_t cmp_eq = 0x00;     // _CMP_EQ_OQ: a == b
constexpr std::uint8_t cmp_neq = 0x04;    // _CMP_NEQ_UQ: a != b (true for NaN)
constexpr std::uint8_t cmp_gt = 0x1E;     // _CMP_GT_OQ
constexpr std::uint8_t cmp_nlt = 0x15;    // _CMP_NLT_UQ: !(a < b) (true for NaN); zmm relu

/// Thrown inside the writer when a program needs more live vector registers than there are.
struct OutOfRegisters {};

/// The comparison predicate of a comparison primitive; 0xFF for the others.
std::uint8_t predicate_of(Prim prim) {
  switch (prim) {
    case Prim::equal:
      return cmp_eq;
    case Prim::not_equal:
      return cmp_neq;
    case Prim::less:
      return cmp_lt;
    case Prim::less_equal:
      return cmp_le;
    case Prim::greater:
      return cmp_gt;
    case Prim::greater_equal:
      return cmp_ge;
    default:
      return 0xFF;
  }
}

/// Whether the generator writes this instruction out. Values are f32 in lanes of 4 bytes, and
/// a comparison's bool result is a lane mask (all ones or zero) that only where and a cast to
/// f32 read: a bool never comes from or goes to memory.
bool covered(const FusedOp& op, bool last) {
  const bool slot_operand = op.operands[0] < 0;
  if (predicate_of(op.prim) != 0xFF)
    return op.in_dtype == DType::f32 && op.out_dtype == DType::boolean && !last;
  if (op.prim == Prim::where)
    return op.in_dtype == DType::f32 && op.out_dtype == DType::f32 && slot_operand;
  if (op.prim == Prim::cast)
    return op.in_dtype == DType::boolean && op.out_dtype == DType::f32 && slot_operand;
  if (op.in_dtype != DType::f32 || op.out_dtype != DType::f32) return false;
  switch (op.prim) {
    case Prim::neg:
    case Prim::abs:
    case Prim::square:
    case Prim::relu:
    case Prim::sqrt:
    case Prim::rsqrt:
    case Prim::tanh:
    case Prim::sigmoid:
    case Prim::add:
    case Prim::sub:
    case Prim::mul:
    case Prim::div:
    case Prim::maximum:
    case Prim::minimum:
      return true;
    default:
      return false;
  }
}

/// For each instruction and operand: whether that operand is the last read of a scratch slot's
/// value (its register is free after the instruction); and for each instruction but the last,
/// whether its result is read at all.
struct Liveness {
  std::vector<std::array<bool, 3>> last_read;
  std::vector<bool> result_read;
};

Liveness liveness_of(const FusedProgram& program) {
  const std::size_t n = program.ops.size();
  Liveness live{std::vector<std::array<bool, 3>>(n), std::vector<bool>(n, false)};
  // Walking backwards: a slot operand is a last read when no later instruction reads the slot
  // before one writes it. The last instruction writes the output, not its result_slot.
  std::array<bool, max_fused_slots> read_later{};
  for (std::size_t i = n; i-- > 0;) {
    const FusedOp& op = program.ops[i];
    if (i + 1 < n) {
      const auto s = static_cast<std::size_t>(op.result_slot);
      live.result_read[i] = read_later[s];
      read_later[s] = false;
    }
    const std::size_t arity = operand_count(op.prim);
    for (std::size_t j = 0; j < arity; ++j) {
      if (op.operands[j] >= 0) continue;
      const auto s = static_cast<std::size_t>(-op.operands[j] - 1);
      live.last_read[i][j] = !read_later[s];
      read_later[s] = true;
    }
  }
  return live;
}

class LoopWriter : public Xbyak::CodeGenerator {
 public:
  /// A writer for vectors of `width` floats: 8 (ymm) or 16 (zmm), whose vector loops ask for
  /// their streams `ahead` bytes ahead (0: not at all).
  LoopWriter(const FusedProgram& program, const FusedLoop& loop, std::int64_t width,
             std::int64_t ahead)
      : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow),
        program_(program),
        loop_(loop),
        live_(liveness_of(program)),
        width_(width),
        wide_(width == 16),
        ahead_(static_cast<int>(ahead)) {}

  /// Writes one loop function; returns its offset in the code. The function walks `rows` rows
  /// of walk[0] elements: input k's row at walk[2 + k] bytes from the last, the output's at
  /// walk[1]. Each row runs the program over its full vectors, then over its last few elements
  /// (fewer than a vector) with masked loads and stores (vmaskmovps with a lane mask in a ymm
  /// register, or the k7 mask on zmm: the masked-off lanes read as zero, as the row kernels'
  /// zero-padded tails do, and are not written). An input held in a register is loaded again at
  /// the start of each row (one value per row, or one in all).
  std::size_t write_function(bool streamed) {
    const std::size_t start = getSize();
    free_ = wide_ ? 0xFFFFFFFFU : 0xFFFFU;  // 32 zmm or 16 ymm registers
    const Xbyak::Reg64 bases[] = {r8, r9, r10, r11, rcx, rbx, r12, r13};
    for (const Xbyak::Reg64& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    // The stack: each input's current row, then the address of the tail's lane mask (ymm).
    const int frame = 8 * (static_cast<int>(max_fused_pointers) + 2);
    const int mask_at = 8 * static_cast<int>(max_fused_pointers);
    sub(rsp, frame);
    mov(r14, rcx);  // walk
    mov(r15, rdx);  // rows
    for (std::size_t k = 0; k < loop_.num_inputs; ++k) {
      if (!used(k)) continue;
      mov(rax, ptr[rdi + static_cast<int>(8 * k)]);
      mov(ptr[rsp + static_cast<int>(8 * k)], rax);
    }
    const int log2_width = wide_ ? 4 : 3;
    mov(rbp, ptr[r14]);  // elements per row
    mov(rdx, rbp);
    shr(rdx, log2_width);
    shl(rdx, log2_width + 2);                 // bytes of full vectors per row
    and_(rbp, static_cast<int>(width_ - 1));  // elements in the tail
    if (wide_) {
      // k7: lanes [0, tail) of the tail.
      mov(rcx, rbp);
      mov(edi, 1);
      shl(edi, cl);
      dec(edi);
      kmovw(k7, edi);
    } else {
      // The tail's mask: lanes [0, tail) all ones, read at lane_masks + 32 - 4 * tail.
      lea(rdi, ptr[rip + lane_masks_]);
      lea(rax, ptr[rbp * 4]);
      sub(rdi, rax);
      add(rdi, 32);
      mov(ptr[rsp + mask_at], rdi);
    }
    std::array<int, max_fused_pointers> broadcast_reg{};
    std::array<Xbyak::Reg64, max_fused_pointers> base;
    std::size_t next_base = 0;
    for (std::size_t k = 0; k < loop_.num_inputs; ++k) {
      if (!used(k)) continue;
      if (loop_.scalar[k])
        broadcast_reg[k] = take();
      else if (next_base < std::size(bases))
        base[k] = bases[next_base++];
      else
        throw OutOfRegisters{};  // more flat inputs and outputs than general registers
    }
    Xbyak::Label row, vectors, tail, next_row, done;
    test(r15, r15);
    jz(done, T_NEAR);
    L(row);
    for (std::size_t k = 0; k < loop_.num_inputs; ++k) {
      if (!used(k)) continue;
      if (loop_.scalar[k]) {
        mov(rdi, ptr[rsp + static_cast<int>(8 * k)]);
        vbroadcastss(vec(broadcast_reg[k]), dword[rdi]);
      } else {
        mov(base[k], ptr[rsp + static_cast<int>(8 * k)]);
      }
    }
    xor_(eax, eax);
    test(rdx, rdx);
    jz(tail, T_NEAR);
    align(32);
    L(vectors);
    write_prefetches(base, streamed);
    write_body(base, broadcast_reg, streamed, false);
    add(rax, static_cast<int>(4 * width_));
    cmp(rax, rdx);
    jb(vectors, T_NEAR);
    L(tail);
    test(rbp, rbp);
    jz(next_row, T_NEAR);
    if (wide_) {
      write_body(base, broadcast_reg, false, true);
    } else {
      tail_mask_ = take();
      mov(rdi, ptr[rsp + mask_at]);
      vmovups(Xbyak::Ymm(tail_mask_), yword[rdi]);
      write_body(base, broadcast_reg, false, true);
      give_back(tail_mask_);
    }
    L(next_row);
    for (std::size_t k = 0; k < loop_.num_inputs; ++k) {
      if (!used(k)) continue;
      mov(rdi, ptr[r14 + static_cast<int>(16 + 8 * k)]);
      add(ptr[rsp + static_cast<int>(8 * k)], rdi);
    }
    add(rsi, ptr[r14 + 8]);
    dec(r15);
    jnz(row, T_NEAR);
    L(done);
    vzeroupper();
    add(rsp, frame);
    for (const Xbyak::Reg64& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    ret();
    return start;
  }

  /// When the loop asks ahead: a request for the line `ahead_` bytes past offset rax of each
  /// flat input (into L2, prefetcht1) and of each output written with plain stores (prefetchw:
  /// the line comes to be written, with no second request to own it). A zmm vector is one
  /// 64-byte line; a ymm one is half of one, and only every other ymm vector asks (each request
  /// holds one of the core's outstanding-miss entries while it runs). Prefetches never fault, so
  /// those past the end of a stream are harmless.
  void write_prefetches(const std::array<Xbyak::Reg64, max_fused_pointers>& base, bool streamed) {
    if (ahead_ == 0) return;
    Xbyak::Label asked;
    if (!wide_) {
      test(eax, 32);
      jnz(asked, T_NEAR);
    }
    for (std::size_t k = 0; k < loop_.num_inputs; ++k) {
      if (!used(k) || loop_.scalar[k]) continue;
      if (k >= program_.num_inputs)
        prefetchw(ptr[base[k] + rax + ahead_]);  // an extra output
      else
        prefetcht1(ptr[base[k] + rax + ahead_]);
    }
    if (!streamed) prefetchw(ptr[rsi + rax + ahead_]);
    L(asked);
  }

  /// The program over one vector at byte offset rax of each flat input and of the output (rsi):
  /// full loads and stores (non-temporal when `streamed`), or, for a row's tail, masked ones.
  /// Every register the body takes is free again at its end.
  void write_body(const std::array<Xbyak::Reg64, max_fused_pointers>& base,
                  const std::array<int, max_fused_pointers>& broadcast_reg, bool streamed,
                  bool masked) {
    std::array<int, max_fused_slots> slot_reg{};
    slot_reg.fill(-1);
    const std::size_t n = program_.ops.size();
    for (std::size_t i = 0; i < n; ++i) {
      const FusedOp& op = program_.ops[i];
      const std::size_t arity = operand_count(op.prim);
      std::array<int, 3> src{-1, -1, -1};
      std::array<int, 3> loaded{-1, -1, -1};
      for (std::size_t j = 0; j < arity; ++j) {
        const std::int16_t a = op.operands[j];
        const std::size_t earlier = first_operand_equal(op, j);
        if (earlier < j) {
          src[j] = src[earlier];  // one register for an operand given twice
        } else if (a < 0) {
          src[j] = slot_reg[static_cast<std::size_t>(-a - 1)];
        } else if (loop_.scalar[static_cast<std::size_t>(a)]) {
          src[j] = broadcast_reg[static_cast<std::size_t>(a)];
        } else {
          loaded[j] = take();
          const Xbyak::Address at = vector_at(base[static_cast<std::size_t>(a)] + rax);
          if (!masked)
            vmovups(vec(loaded[j]), at);
          else if (wide_)
            vmovups(Xbyak::Zmm(loaded[j]) | k7 | T_z, at);
          else
            vmaskmovps(Xbyak::Ymm(loaded[j]), Xbyak::Ymm(tail_mask_), at);
          src[j] = loaded[j];
        }
      }
      const int d = take();
      const auto reg = [&](std::size_t j) { return vec(src[j] < 0 ? 0 : src[j]); };
      write_op(op.prim, vec(d), reg(0), reg(1), reg(2));
      // Free each operand's register once: a load's, or a slot value's after its last read
      // (the liveness marks the first of repeated operands as the last read).
      for (std::size_t j = 0; j < arity; ++j) {
        if (loaded[j] >= 0) give_back(loaded[j]);
        if (op.operands[j] < 0 && live_.last_read[i][j] && first_operand_equal(op, j) == j)
          give_back(src[j]);
      }
      if (op.store >= 0) {  // an extra output: plain stores (a later instruction may read it)
        const auto k = program_.num_inputs + static_cast<std::size_t>(op.store);
        const Xbyak::Address out = vector_at(base[k] + rax);
        if (masked && wide_)
          vmovups(out | k7, Xbyak::Zmm(d));
        else if (masked)
          vmaskmovps(out, Xbyak::Ymm(tail_mask_), Xbyak::Ymm(d));
        else
          vmovups(out, vec(d));
      }
      if (i + 1 == n) {
        const Xbyak::Address out = vector_at(rsi + rax);
        if (masked && wide_)
          vmovups(out | k7, Xbyak::Zmm(d));
        else if (masked)
          vmaskmovps(out, Xbyak::Ymm(tail_mask_), Xbyak::Ymm(d));
        else if (streamed)
          vmovntps(out, vec(d));
        else
          vmovups(out, vec(d));
        give_back(d);
      } else if (live_.result_read[i]) {
        slot_reg[static_cast<std::size_t>(op.result_slot)] = d;
      } else {
        give_back(d);
      }
    }
  }

  /// The constants the functions read, a vector's worth of copies each, after the code.
  void write_constants() {
    align(64);
    if (!wide_) {
      L(lane_masks_);  // 8 lanes of all ones, then 8 of zero: the ymm tails' masks
      for (std::int64_t i = 0; i < 2 * width_; ++i) dd(i < width_ ? 0xFFFFFFFFU : 0U);
    }
    for (Constant& c : constants_) {
      L(*c.label);
      for (std::int64_t i = 0; i < width_; ++i) dd(c.bits);
    }
  }

 private:
  struct Constant {
    std::uint32_t bits;
    std::unique_ptr<Xbyak::Label> label;
  };

  /// Vector register r at this writer's width.
  Xbyak::Xmm vec(int r) const {
    return wide_ ? Xbyak::Xmm(Xbyak::Zmm(r)) : Xbyak::Xmm(Xbyak::Ymm(r));
  }
  /// A vector's memory operand at this writer's width.
  Xbyak::Address vector_at(const Xbyak::RegExp& at) { return wide_ ? zword[at] : yword[at]; }
  Xbyak::Address vector_at(const Xbyak::RegRip& at) { return wide_ ? zword[at] : yword[at]; }

  /// The first operand of op equal to operand j (j itself when none before it is).
  static std::size_t first_operand_equal(const FusedOp& op, std::size_t j) {
    for (std::size_t e = 0; e < j; ++e)
      if (op.operands[e] == op.operands[j]) return e;
    return j;
  }

  bool used(std::size_t k) const {
    if (k >= program_.num_inputs) return true;  // an extra output
    for (const FusedOp& op : program_.ops) {
      const std::size_t arity = operand_count(op.prim);
      for (std::size_t j = 0; j < arity; ++j)
        if (op.operands[j] == static_cast<std::int16_t>(k)) return true;
    }
    return false;
  }

  int take() {
    if (free_ == 0) throw OutOfRegisters{};
    const int r = std::countr_zero(free_);
    free_ &= free_ - 1;
    return r;
  }
  void give_back(int r) { free_ |= 1U << static_cast<unsigned>(r); }

  /// A vector operand holding `bits` in every lane.
  Xbyak::Address constant_bits(std::uint32_t bits) {
    auto it = std::find_if(constants_.begin(), constants_.end(),
                           [&](const Constant& c) { return c.bits == bits; });
    if (it == constants_.end()) {
      constants_.push_back({bits, std::make_unique<Xbyak::Label>()});
      it = constants_.end() - 1;
    }
    return vector_at(rip + *it->label);
  }
  Xbyak::Address k(float value) { return constant_bits(std::bit_cast<std::uint32_t>(value)); }

  /// d = min(B(hi), max(B(lo), x)), as clamp_keeping_nan (NaN passes through both).
  void clamp(const Xbyak::Xmm& d, const Xbyak::Xmm& x, float lo, float hi) {
    const Xbyak::Xmm t = vec(take());
    vmovaps(t, k(lo));
    vmaxps(t, t, x);
    vmovaps(d, k(hi));
    vminps(d, d, t);
    give_back(t.getIdx());
  }

  /// p = fma(p, x, c) for each coefficient after the first, which p starts at.
  void polynomial(const Xbyak::Xmm& p, const Xbyak::Xmm& x, std::initializer_list<float> c) {
    auto it = c.begin();
    vmovaps(p, k(*it));
    for (++it; it != c.end(); ++it) vfmadd213ps(p, x, k(*it));
  }

  /// d = the bits of a with `bits` (and: vandps, or vpandd on zmm, which needs no AVX-512DQ).
  void and_bits(const Xbyak::Xmm& d, const Xbyak::Xmm& a, std::uint32_t bits) {
    if (wide_)
      vpandd(d, a, constant_bits(bits));
    else
      vandps(d, a, constant_bits(bits));
  }
  /// d = the bits of a xor `bits` (vxorps, or vpxord on zmm).
  void xor_bits(const Xbyak::Xmm& d, const Xbyak::Xmm& a, std::uint32_t bits) {
    if (wide_)
      vpxord(d, a, constant_bits(bits));
    else
      vxorps(d, a, constant_bits(bits));
  }

  /// One instruction: d from a (and b, c); d is distinct from them, which stay unchanged. A
  /// comparison's result is a lane mask in a vector register (all ones or zero per lane) at
  /// both widths: on zmm the comparison sets k1 and vpternlogd writes all ones under it.
  void write_op(Prim prim, const Xbyak::Xmm& d, const Xbyak::Xmm& a, const Xbyak::Xmm& b,
                const Xbyak::Xmm& c) {
    if (const std::uint8_t predicate = predicate_of(prim); predicate != 0xFF) {
      if (wide_) {
        vcmpps(k1, a, b, predicate);
        vpternlogd(Xbyak::Zmm(d.getIdx()) | k1 | T_z, d, d, 0xFF);
      } else {
        vcmpps(d, a, b, predicate);  // the lane mask of a op b
      }
      return;
    }
    switch (prim) {
      case Prim::where:  // a ? b : c with the condition a lane mask
        if (wide_) {
          vptestmd(k1, a, a);
          vblendmps(Xbyak::Zmm(d.getIdx()) | k1, c, b);
        } else {
          vblendvps(d, c, b, a);
        }
        break;
      case Prim::cast:  // bool (a lane mask) to f32: 1.0 or +0.0
        and_bits(d, a, std::bit_cast<std::uint32_t>(1.0f));
        break;
      case Prim::add:
        vaddps(d, a, b);
        break;
      case Prim::sub:
        vsubps(d, a, b);
        break;
      case Prim::mul:
        vmulps(d, a, b);
        break;
      case Prim::div:
        vdivps(d, a, b);
        break;
      case Prim::square:
        vmulps(d, a, a);
        break;
      case Prim::neg:  // flip_sign: x ^ -0.0
        xor_bits(d, a, 0x80000000U);
        break;
      case Prim::abs:  // andnot(-0.0, x)
        and_bits(d, a, 0x7FFFFFFFU);
        break;
      case Prim::relu:  // select(x < 0, 0, x)
        if (wide_) {
          vcmpps(k1, a, k(0.0f), cmp_nlt);
          vmovaps(Xbyak::Zmm(d.getIdx()) | k1 | T_z, a);
        } else {
          vcmpps(d, a, k(0.0f), cmp_lt);
          vandnps(d, d, a);
        }
        break;
      case Prim::sqrt:
        vsqrtps(d, a);
        break;
      case Prim::rsqrt: {  // 1 / sqrt(x)
        const Xbyak::Xmm t = vec(take());
        vsqrtps(t, a);
        vmovaps(d, k(1.0f));
        vdivps(d, d, t);
        give_back(t.getIdx());
        break;
      }
      case Prim::maximum:
      case Prim::minimum: {  // select((a >= b) | isnan(a), a, b), or <= for minimum
        const std::uint8_t order = prim == Prim::maximum ? cmp_ge : cmp_le;
        if (wide_) {
          vcmpps(k1, a, b, order);
          vcmpps(k2, a, a, cmp_unord);
          korw(k1, k1, k2);
          vblendmps(Xbyak::Zmm(d.getIdx()) | k1, b, a);
          break;
        }
        const Xbyak::Xmm t = vec(take());
        vcmpps(d, a, b, order);
        vcmpps(t, a, a, cmp_unord);
        vorps(d, d, t);
        vblendvps(d, b, a, d);
        give_back(t.getIdx());
        break;
      }
      case Prim::tanh:
        write_tanh(d, a);
        break;
      case Prim::sigmoid:
        write_sigmoid(d, a);
        break;
      default:
        throw OutOfRegisters{};  // not reached: covered() screens the program first
    }
  }

  /// TanhOp::simd for float: c * P(c^2) / Q(c^2) on c = clamp(x, -9, 9), clamped to [-1, 1].
  void write_tanh(const Xbyak::Xmm& d, const Xbyak::Xmm& x) {
    const Xbyak::Xmm s = vec(take()), p = vec(take()), q = vec(take());
    clamp(d, x, -9.f, 9.f);
    vmulps(s, d, d);
    polynomial(p, s, {1.33551774e-08f, 2.06094537e-05f, 0.00349561055f, 0.133810446f, 1.f});
    polynomial(q, s, {7.77676917e-07f, 0.00032856717f, 0.0258770678f, 0.467143595f, 1.f});
    vmulps(p, d, p);
    vdivps(p, p, q);
    clamp(d, p, -1.f, 1.f);
    give_back(s.getIdx());
    give_back(p.getIdx());
    give_back(q.getIdx());
  }

  /// SigmoidOp::simd for float: 1 / fma(p, 2^n, 1) with exp_clamped_f32_parts(-x) = (p, 2^n).
  /// Rounding to the nearest integer is vroundps on ymm and vrndscaleps (its AVX-512 form, the
  /// same result) on zmm.
  void write_sigmoid(const Xbyak::Xmm& d, const Xbyak::Xmm& x) {
    const Xbyak::Xmm y = vec(take()), n = vec(take());
    xor_bits(y, x, 0x80000000U);
    clamp(d, y, -87.33654f, 88.8f);  // d: the clamped argument, then r
    vmulps(n, d, k(1.44269504088896341f));
    if (wide_)
      vrndscaleps(n, n, 0);  // _MM_FROUND_TO_NEAREST_INT
    else
      vroundps(n, n, 0);
    vfmadd231ps(d, n, k(-0.693359375f));
    vfmadd231ps(d, n, k(2.12194440e-4f));
    vcvttps2dq(n, n);
    vpaddd(n, n, constant_bits(127));
    vpslld(n, n, 23);  // 2^n
    polynomial(y, d,
               {0.00829026196f, 0.0418979004f, 0.166676372f, 0.499991506f, 0.999999702f, 1.f});
    vfmadd213ps(y, n, k(1.f));  // p * 2^n + 1
    vmovaps(d, k(1.f));
    vdivps(d, d, y);
    give_back(y.getIdx());
    give_back(n.getIdx());
  }

  const FusedProgram& program_;
  const FusedLoop& loop_;
  const Liveness live_;
  const std::int64_t width_;
  const bool wide_;
  const int ahead_;
  std::uint32_t free_ = 0;  // vector registers not holding a value
  int tail_mask_ = -1;      // the ymm register of the tail's lane mask, while a tail is written
  std::vector<Constant> constants_;
  Xbyak::Label lane_masks_;
};

}  // namespace

}  // namespace kiln::detail
