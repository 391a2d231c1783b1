// libFuzzer target: the safetensors reader on an in-memory file.
#include "fuzz_input.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto tensors = kiln::io::detail::read_safetensors(kiln_fuzz::bytes(data, size),
                                                            "load_safetensors", "fuzz input");
    for (const auto& [name, tensor] : tensors) kiln_fuzz::touch(tensor);
  } catch (const kiln::Error& e) {
    kiln_fuzz::check_message(e, "load_safetensors");
  }
  return 0;
}
