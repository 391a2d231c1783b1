#pragma once
/// @file io.hpp
/// Reading and writing tensors: safetensors, NumPy .npy and .npz.
///
/// Every loader treats its file as untrusted: sizes, offsets and shapes are validated
/// before anything is allocated, and bad input throws kiln::Error naming the operation and
/// the file, e.g. `[load_safetensors] w.safetensors: tensor 'b' has data_offsets [0,12] but
/// F32 [2,2] needs 16 bytes`. Loaders that return several tensors read all of them before
/// returning (nothing is returned on error), so a caller can assign all or nothing.
///
/// Every saver writes atomically: a temporary file in the same folder is written, flushed,
/// fsync'ed and renamed over the target, so a crash mid-save leaves the old file intact.
/// See docs/io.md for the formats and limits.

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln::io {

/// One tensor of a file, as its header describes it (no tensor data is read).
struct TensorInfo {
  /// The tensor's name; for .npz the member name without ".npy"; for .npy the file's stem.
  std::string name;
  /// The dtype the tensor loads as (F16 and BF16 load as f32). std::nullopt when kiln cannot
  /// load the stored element type (e.g. safetensors U8): loading that tensor throws.
  std::optional<DType> dtype;
  /// The element type as the file writes it: "F32", "BF16", "BOOL" (safetensors),
  /// "<f4", ">i8", "|b1" (NumPy).
  std::string stored_dtype;
  Shape shape;
  /// Bytes of the tensor's data in the file (uncompressed).
  std::uint64_t size_bytes = 0;
};

/// The safetensors `__metadata__` map (free-form string keys and values).
using Metadata = std::map<std::string, std::string>;

// ------------------------------------------------------------------------- safetensors

/// Writes `tensors` to a safetensors file. Tensors must be defined and concrete (not symbolic
/// tensors of a function being traced); views are written in row-major order. Names may be
/// any non-empty UTF-8 string except "__metadata__". Tensors are laid out as the reference
/// implementation does (by descending dtype alignment, then by name), so the file is
/// byte-for-byte what `safetensors.numpy.save_file` writes for the same arrays and metadata
/// (with several metadata entries the reference uses hash order; kiln sorts them by key).
/// `metadata` becomes the `__metadata__` entry (omitted when empty).
void save_safetensors(const std::filesystem::path& path,
                      const std::map<std::string, Tensor>& tensors, const Metadata& metadata = {});

/// Every tensor of a safetensors file. Throws if any tensor has an element type kiln cannot
/// load. Large files are memory-mapped, small ones read.
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path);

/// The named tensors of a safetensors file; only their bytes are read. Throws, listing them,
/// if some names are not in the file.
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path,
                                               const std::vector<std::string>& names);

/// The `__metadata__` map of a safetensors file (empty when absent). Reads only the header.
Metadata load_safetensors_metadata(const std::filesystem::path& path);

/// An open safetensors file: the header is parsed and validated on construction, the data
/// stays on disk (mapped when large) until a tensor is loaded. Use it to check names, dtypes
/// and shapes against a model before loading anything, then load exactly what is needed.
/// Loaded tensors own their memory: they outlive the SafetensorsFile.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::filesystem::path& path() const;
  /// The tensors in file order (by data offset).
  const std::vector<TensorInfo>& tensors() const;
  const Metadata& metadata() const;
  bool contains(const std::string& name) const;
  /// The description of one tensor; throws if the file has no such tensor.
  const TensorInfo& info(const std::string& name) const;
  /// One tensor; throws if missing or if its element type cannot be loaded.
  Tensor load(const std::string& name) const;
  /// The named tensors, all validated before any is read.
  std::map<std::string, Tensor> load(const std::vector<std::string>& names) const;
  /// The same for a braced list of names: `file.load({"a", "b"})`.
  std::map<std::string, Tensor> load(std::initializer_list<std::string> names) const {
    return load(std::vector<std::string>(names));
  }
  /// Every tensor.
  std::map<std::string, Tensor> load_all() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// ------------------------------------------------------------------------------- NumPy

/// Writes one tensor as a NumPy .npy file (format 1.0; 2.0 if the header needs it),
/// little-endian, C order: '<f4', '<f8', '<i4', '<i8' or '|b1'.
void save_npy(const std::filesystem::path& path, const Tensor& tensor);

/// Reads a .npy file (format 1.0, 2.0 or 3.0). Element types '<f4' '<f8' '<i4' '<i8' '|b1'
/// load as is; '<f2' loads as f32; big-endian ('>f4', ...) is converted; Fortran-order
/// arrays are reordered into kiln's row-major layout.
Tensor load_npy(const std::filesystem::path& path);

/// Writes a .npz archive with one member "<name>.npy" per tensor, stored or (compressed)
/// deflated, readable by numpy.load. Names must be usable as archive member names: non-empty,
/// '/'-separated parts that are neither empty, "." nor "..", no '\\' and no NUL.
void save_npz(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
              bool compressed = false);

/// Every array of a .npz archive (stored or deflated members), keyed by member name without
/// ".npy". Checks each member's CRC; rejects members that are not .npy files, encrypted
/// members, other compression methods and unsafe names ("../x.npy", "/abs.npy").
std::map<std::string, Tensor> load_npz(const std::filesystem::path& path);

/// The named arrays of a .npz archive; throws, listing them, if some are missing.
std::map<std::string, Tensor> load_npz(const std::filesystem::path& path,
                                       const std::vector<std::string>& names);

// ------------------------------------------------------------------------------- any format

enum class FileFormat { safetensors, npy, npz };

/// The format of a file, from its first bytes (NumPy magic, zip signature, or a safetensors
/// header length followed by '{'). Throws if it is none of them.
FileFormat detect_format(const std::filesystem::path& path);

/// Names, dtypes, shapes and sizes of the tensors in a safetensors, .npy or .npz file, read
/// from headers only (for .npz, each member's .npy header). Validates headers as loading does.
std::vector<TensorInfo> inspect(const std::filesystem::path& path);

}  // namespace kiln::io
