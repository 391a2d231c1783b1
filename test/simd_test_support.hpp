#pragma once
// The elementwise row tables of every instruction set this CPU runs, for tests that call each
// table's kernels directly (test_elementwise.cpp, test_simd_semantics.cpp). The eager ops use
// only the table of simd_level(); scripts/test.sh runs the kernel tests once per KILN_SIMD
// value to cover the others there. Also the streaming threshold forced for a test's lifetime.

#include <cstdint>
#include <vector>

#include "kernels/elementwise_table.hpp"
#include "kernels/streaming.hpp"

namespace kiln::test {

/// Outputs above 8 MiB are streamed while this lives, whatever the last-level cache (a 16 MiB
/// output is not larger than a 16 MiB L3, so the machine's own threshold would not stream it).
struct StreamAbove8MiB {
  StreamAbove8MiB() { kiln::detail::set_stream_output_bytes(std::int64_t{8} << 20); }
  ~StreamAbove8MiB() { kiln::detail::set_stream_output_bytes(0); }
  StreamAbove8MiB(const StreamAbove8MiB&) = delete;
  StreamAbove8MiB& operator=(const StreamAbove8MiB&) = delete;
};

/// sse2 always, then avx2 and avx512 when this CPU (and its OS) runs them; lowest first.
inline std::vector<const kiln::detail::ElementwiseRowTable*> row_tables_of_this_cpu() {
  using namespace kiln::detail;
  std::vector<const ElementwiseRowTable*> tables;
  for (int level = 0; level <= static_cast<int>(cpu_simd_level()); ++level)
    tables.push_back(&elementwise_rows(static_cast<SimdLevel>(level)));
  return tables;
}

}  // namespace kiln::test
