// libFuzzer target: the .npy reader on an in-memory file.
#include "fuzz_input.hpp"
#include "io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    kiln_fuzz::touch(
        kiln::io::detail::read_npy(kiln_fuzz::bytes(data, size), "load_npy", "fuzz input"));
  } catch (const kiln::Error& e) {
    kiln_fuzz::check_message(e, "load_npy");
  }
  return 0;
}
