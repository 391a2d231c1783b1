// Call signatures of kiln::function: the cache key packed from a call's arguments, the
// relaxed key of a signature with dynamic dims, input_signature checks, and the descriptions
// that retrace and limit messages quote.
#include "jit/signature.hpp"

#include <fmt/format.h>

#include <cstring>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

std::string shape_text(DType d, const Shape& s) {
  return fmt::format("{} {}", dtype_name(d), s.to_string());
}

namespace {
/// Appends a tag, the tensor's dtype, rank and dims to the key. Written in place: the key grows
/// by the largest entry, the header and all max_rank dims are stored with fixed-size copies
/// (variable-size ones compile to `rep movs`, and a staging buffer stalls on store forwarding),
/// and the key is trimmed to the entry's real length.
void append_tensor_key(ArgPack& p, const Tensor& t, char tag) {
  constexpr std::size_t largest = 3 + Shape::max_rank * sizeof(std::int64_t);
  const TensorImpl& impl = *t.impl();
  const std::size_t rank = impl.shape.size();
  std::string& key = p.key;
  const std::size_t at = key.size();
  key.resize(at + largest);
  char* out = key.data() + at;
  std::size_t n = 0;
  if (tag != 0) out[n++] = tag;
  out[n++] = static_cast<char>('0' + static_cast<int>(impl.dtype));
  out[n++] = static_cast<char>(rank);
  std::memcpy(out + n, impl.shape.data(), Shape::max_rank * sizeof(std::int64_t));
  p.dims_at.push_back(static_cast<std::uint32_t>(at + n));
  key.resize(at + n + rank * sizeof(std::int64_t));
}
}  // namespace

void pack_arg(ArgPack& p, const Tensor& t) {
  check_defined(t, "function", static_cast<int>(p.args.size()));
  append_tensor_key(p, t, 'T');
  p.args.push_back({'T', static_cast<std::uint32_t>(p.tensors.size()), 1, {}});
  p.tensors.push_back(&t);
}

void pack_arg(ArgPack& p, const std::vector<Tensor>& ts) {
  p.key.push_back('V');
  const auto n = static_cast<std::uint32_t>(ts.size());
  p.key.append(reinterpret_cast<const char*>(&n), sizeof(n));
  p.args.push_back({'V', static_cast<std::uint32_t>(p.tensors.size()), n, {}});
  for (const Tensor& t : ts) {
    check_defined(t, "function", static_cast<int>(p.args.size() - 1));
    append_tensor_key(p, t, 0);
    p.tensors.push_back(&t);
  }
}

void pack_arg(ArgPack& p, const Variable& v) {
  const std::uint64_t id = v.id();
  p.key.push_back('R');
  p.key.append(reinterpret_cast<const char*>(&id), sizeof(id));
  p.args.push_back({'R', 0, 0, fmt::format("variable '{}' (id {})", v.name(), id)});
}

void pack_arg(ArgPack& p, const std::string& s) {
  pack_static(p, 's', s.data(), s.size(), fmt::format("\"{}\"", s));
}
void pack_arg(ArgPack& p, const char* s) { pack_arg(p, std::string(s)); }

void pack_static(ArgPack& p, char type, const void* bytes, std::size_t size, std::string text) {
  p.key.push_back('S');
  p.key.push_back(type);
  const auto n = static_cast<std::uint32_t>(size);
  p.key.append(reinterpret_cast<const char*>(&n), sizeof(n));
  p.key.append(static_cast<const char*>(bytes), size);
  p.args.push_back({'S', 0, 0, fmt::format("value {}", text)});
}

std::vector<std::string> ArgPack::describe() const {
  std::vector<std::string> out;
  for (const Arg& a : args) {
    if (a.kind == 'T') {
      const Tensor& t = *tensors[a.first];
      out.push_back(fmt::format("shape {} dtype {}", t.shape().to_string(), dtype_name(t.dtype())));
    } else if (a.kind == 'V') {
      std::string d = fmt::format("{} tensors:", a.count);
      for (std::uint32_t i = 0; i < a.count; ++i)
        fmt::format_to(std::back_inserter(d), " {}",
                       shape_text(tensors[a.first + i]->dtype(), tensors[a.first + i]->shape()));
      out.push_back(std::move(d));
    } else {
      out.push_back(a.text);
    }
  }
  return out;
}

void check_signature(const FunctionOptions& o, const ArgPack& args) {
  if (o.input_signature.empty()) return;
  if (o.input_signature.size() != args.tensors.size())
    fail(o.name, "called with {} tensors but its input_signature has {}", args.tensors.size(),
         o.input_signature.size());
  for (std::size_t i = 0; i < args.tensors.size(); ++i) {
    const TensorSpec& spec = o.input_signature[i];
    const Tensor& t = *args.tensors[i];
    bool ok = spec.dtype == t.dtype() && spec.shape.size() == t.shape().size();
    for (std::size_t d = 0; ok && d < spec.shape.size(); ++d)
      ok = spec.shape[d] == -1 || spec.shape[d] == t.shape()[d];
    if (!ok)
      fail(o.name, "tensor {} is {} but the input_signature says {} {}", i,
           shape_text(t.dtype(), t.shape()), dtype_name(spec.dtype), spec.shape.to_string());
  }
}

/// The cache key of a call whose signature has dynamic dims: each dynamic dim's size in the
/// key is replaced by a symbol; dynamic dims of equal size share one (their equality is part
/// of the signature, so ops that combine them trace correctly). Also returns, per symbol, where
/// its size is read from.
std::string relaxed_key(const ArgPack& args,
                        const std::vector<std::pair<std::uint32_t, std::uint32_t>>& dynamic_dims,
                        std::vector<std::pair<std::uint32_t, std::uint32_t>>* sources) {
  std::string key = args.key;
  std::int64_t symbols = 0;
  thread_local std::vector<std::int64_t> symbol_of;
  symbol_of.clear();
  for (std::size_t j = 0; j < dynamic_dims.size(); ++j) {
    const auto [t, d] = dynamic_dims[j];
    const std::int64_t size = args.tensors[t]->shape()[d];
    std::int64_t symbol = -1;
    for (std::size_t k = 0; k < j && symbol < 0; ++k) {
      const auto [tk, dk] = dynamic_dims[k];
      if (args.tensors[tk]->shape()[dk] == size) symbol = symbol_of[k];
    }
    if (symbol < 0) {
      symbol = symbols++;
      if (sources != nullptr) sources->emplace_back(t, d);
    }
    symbol_of.push_back(symbol);
    const std::int64_t encoded = dynamic_dim(symbol);
    std::memcpy(&key[args.dims_at[t] + d * sizeof(std::int64_t)], &encoded, sizeof(encoded));
  }
  return key;
}

/// "argument 0: shape [32,5,10] dtype f32 -> shape [16,5,10] dtype f32; ..."
std::string describe_change(const std::vector<std::string>& before,
                            const std::vector<std::string>& now) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (i >= before.size())
      parts.push_back(fmt::format("argument {}: new, {}", i, now[i]));
    else if (before[i] != now[i])
      parts.push_back(fmt::format("argument {}: {} -> {}", i, before[i], now[i]));
  }
  if (parts.empty()) return "the arguments look the same as the previous call";
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace kiln::detail
