// libFuzzer target: the .npz reader (libzip over an in-memory buffer) and inspect.
#include "fuzz_input.hpp"
#include "io/npz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = kiln_fuzz::bytes(data, size);
  try {
    for (const auto& [name, tensor] :
         kiln::io::detail::read_npz(input, nullptr, "load_npz", "fuzz input"))
      kiln_fuzz::touch(tensor);
  } catch (const kiln::Error& e) {
    kiln_fuzz::check_message(e, "load_npz");
  }
  try {
    (void)kiln::io::detail::inspect_npz(input, "inspect", "fuzz input");
  } catch (const kiln::Error& e) {
    kiln_fuzz::check_message(e, "inspect");
  }
  return 0;
}
