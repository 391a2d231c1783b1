#pragma once
// Helpers shared by the io tests: temporary folders, tensors of every dtype, byte crafting.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "test_paths.hpp"

namespace io_test {

/// The Python of the project's private environment (scripts/python-env.sh: $KILN_PYTHON, else
/// $KILN_VENV or .venv-kiln), or "" when it is missing or cannot import `modules`
/// ("numpy, safetensors").
inline std::string test_python(const std::string& modules) {
  std::string python;
  if (const char* env = std::getenv("KILN_PYTHON"); env && *env) {
    python = env;
  } else {
    const char* venv = std::getenv("KILN_VENV");
    python = (venv && *venv ? std::string(venv)
                            : std::string(test_paths::source_dir()) + "/.venv-kiln") +
             "/bin/python";
  }
  const std::string probe = "'" + python + "' -c 'import " + modules + "' >/dev/null 2>&1";
  if (!std::filesystem::exists(python) || std::system(probe.c_str()) != 0) return {};
  return python;
}

/// A fresh folder under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln-io-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  /// Names of the files in the folder.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void append(std::vector<std::uint8_t>& out, const std::string& text) {
  out.insert(out.end(), text.begin(), text.end());
}

inline void append_le(std::vector<std::uint8_t>& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

template <class T>
void append_values(std::vector<std::uint8_t>& out, const std::vector<T>& values) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(values.data());
  out.insert(out.end(), p, p + values.size() * sizeof(T));
}

/// A safetensors file: the 8-byte length, `header` as given (no padding), then `data`.
inline std::vector<std::uint8_t> safetensors_bytes(const std::string& header,
                                                   const std::vector<std::uint8_t>& data = {}) {
  std::vector<std::uint8_t> out;
  append_le(out, header.size(), 8);
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// A .npy file (version 1.0) with the given dict text and data.
inline std::vector<std::uint8_t> npy_bytes(const std::string& dict,
                                           const std::vector<std::uint8_t>& data = {},
                                           int major = 1) {
  std::vector<std::uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major),
                                   0};
  const std::string header = dict + "\n";
  append_le(out, header.size(), major == 1 ? 2 : 4);
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// A deterministic stream of 64-bit patterns (xorshift64), for tests that sweep bit patterns.
class XorShift64 {
 public:
  explicit XorShift64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t operator()() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }

 private:
  std::uint64_t state_;
};

/// Deterministic values of `dtype` with `shape` (negative numbers included).
inline kiln::Tensor sample(kiln::DType dtype, const kiln::Shape& shape) {
  const auto n = static_cast<std::size_t>(shape.numel());
  switch (dtype) {
    case kiln::DType::f32: {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 3.f;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::f64: {
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) * 0.25 - 1.0 / 3.0;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i32: {
      std::vector<std::int32_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(i) - 7;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i64: {
      std::vector<std::int64_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = (static_cast<std::int64_t>(i) - 2) * 100000000000;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::boolean: {
      std::vector<bool> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = i % 3 == 0;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i8: {
      std::vector<std::int8_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int8_t>(37 * i - 128);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::u8: {
      std::vector<std::uint8_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(251 - 13 * i);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::f16: {
      std::vector<kiln::float16> v(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = kiln::float16(static_cast<float>(i) * 0.375f - 2.f);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::bf16: {
      std::vector<kiln::bfloat16> v(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = kiln::bfloat16((static_cast<float>(i) - 7.3f) * 1000.f);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i16: {
      std::vector<std::int16_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int16_t>(4099 * i - 32768);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::u16: {
      std::vector<std::uint16_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint16_t>(65535 - 2731 * i);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::u32: {
      std::vector<std::uint32_t> v(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::uint32_t>(4000000000u - 123456789u * i);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::u64: {
      std::vector<std::uint64_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = 18446744073709551615ULL - 1000000000007ULL * i;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::f8e4m3fn:
    case kiln::DType::f8e4m3fnuz:
    case kiln::DType::f8e5m2:
    case kiln::DType::f8e5m2fnuz:
    case kiln::DType::f4e2m1fn:
      return kiln::cast(sample(kiln::f32, shape), dtype);
    case kiln::DType::i4:
    case kiln::DType::u4:
    case kiln::DType::i2:
    case kiln::DType::u2:
      return kiln::cast(sample(kiln::i32, shape), dtype);
  }
  return {};
}

/// The row-major bytes of a tensor.
inline std::vector<std::uint8_t> bytes_of(const kiln::Tensor& t) {
  const kiln::Tensor c = t.contiguous();
  const auto* p = static_cast<const std::uint8_t*>(c.data());
  return {p, p + static_cast<std::size_t>(c.size()) * kiln::dtype_size(c.dtype())};
}

/// Same dtype, shape and bytes.
inline bool same(const kiln::Tensor& a, const kiln::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && bytes_of(a) == bytes_of(b);
}

inline const kiln::DType all_dtypes[] = {kiln::f32, kiln::f64, kiln::i32, kiln::i64,  kiln::boolean,
                                         kiln::i8,  kiln::u8,  kiln::f16, kiln::bf16, kiln::i16,
                                         kiln::u16, kiln::u32, kiln::u64};

inline const kiln::Shape round_trip_shapes[] = {
    kiln::Shape{},        kiln::Shape{0},
    kiln::Shape{5},       kiln::Shape{2, 3},
    kiln::Shape{0, 4},    kiln::Shape{2, 0, 3},
    kiln::Shape{2, 3, 4}, kiln::Shape{1, 2, 1, 2, 1, 2, 1, 2}};

}  // namespace io_test
