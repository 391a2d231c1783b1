// Weights files whatever their format: a map from key to tensor read from safetensors, .npz or
// .npy (sniffed from the bytes), written as safetensors or .npz by the path's extension.
#include "io/weights_file.hpp"

#include "core/fail.hpp"
#include "io/mapped_file.hpp"
#include "io/npy.hpp"
#include "io/npz.hpp"
#include "io/safetensors.hpp"
#include "io/sniff.hpp"

namespace kiln::io::detail {

using kiln::detail::fail;

/// The values of a weights file by key, whatever its format; errors name `op`. The file is
/// opened once: its format is read from the same bytes that are then parsed.
std::map<std::string, Tensor> read_weights_file(const std::filesystem::path& path,
                                                const std::string& op) {
  const std::string source = path.string();
  const MappedFile file(path, op);
  switch (checked_format(file.bytes(), op, source)) {
    case FileFormat::safetensors: {
      const auto header = parse_safetensors(file.bytes(), op, source);
      std::vector<std::size_t> all(header.tensors.size());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      return read_selected(file, header, all, op, source);
    }
    case FileFormat::npz:
      return read_npz(file.bytes(), nullptr, op, source);
    case FileFormat::npy:
      return {{path.stem().string(), read_npy(file.bytes(), op, source)}};
  }
  fail(op, "{}: unknown file format", source);
}

void write_weights_file(const std::filesystem::path& path,
                        const std::map<std::string, Tensor>& values, const Metadata& metadata,
                        const char* op) {
  if (path.extension() == ".npz") {
    if (!metadata.empty())
      fail(op, "{}: .npz files have no metadata; save as .safetensors to keep it", path.string());
    save_npz(path, values);
  } else {
    save_safetensors(path, values, metadata);
  }
}

}  // namespace kiln::io::detail
