// ONNX's own backend node tests run on kiln (issue 23): test/data/onnx_node_cases.py converts
// the cases the `onnx` package generates into .npy files and a manifest; every single-node case
// whose op type is in the mapping table (onnx_conformance_ops_*.cpp) runs with kiln's ops and is
// compared with ONNX's expected outputs. Cases listed in test/data/onnx_node_exceptions.txt are
// expected to fail (each with its reason); every other mapped case must pass.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "io_test_support.hpp"
#include "onnx_conformance.hpp"

namespace onnx_conformance {

// ------------------------------------------------------------------ Case and helpers

const Json& Case::attr(const std::string& n) const {
  const Json& v = attributes->at(n);
  if (v.is_object() && v.contains("unsupported"))
    throw NotMapped(fmt::format("attribute {} of type {}", n, v["unsupported"].get<std::string>()));
  return v;
}

namespace {
double json_float(const Json& v) {
  if (v.is_object() && v.contains("float")) {
    const auto s = v["float"].get<std::string>();
    if (s == "nan") return std::nan("");
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}
}  // namespace

std::int64_t Case::i(const std::string& n, std::int64_t fallback) const {
  return has_attr(n) ? attr(n).get<std::int64_t>() : fallback;
}
double Case::f(const std::string& n, double fallback) const {
  return has_attr(n) ? json_float(attr(n)) : fallback;
}
std::string Case::s(const std::string& n, const std::string& fallback) const {
  return has_attr(n) ? attr(n).get<std::string>() : fallback;
}
std::vector<std::int64_t> Case::ints(const std::string& n,
                                     const std::vector<std::int64_t>& fallback) const {
  return has_attr(n) ? attr(n).get<std::vector<std::int64_t>>() : fallback;
}
std::vector<double> Case::floats(const std::string& n) const {
  std::vector<double> out;
  if (has_attr(n))
    for (const auto& v : attr(n)) out.push_back(json_float(v));
  return out;
}
Tensor Case::t(const std::string& n) const {
  const Json& v = attr(n);
  if (!v.is_object() || !v.contains("tensor")) throw NotMapped("attribute " + n + " is no tensor");
  return kiln::io::load_npy(root / v["tensor"].get<std::string>());
}
void Case::only(std::initializer_list<const char*> known) const {
  for (const auto& [name, value] : attributes->items()) {
    bool found = false;
    for (const char* k : known) found = found || name == k;
    if (!found) throw NotMapped("attribute " + name);
  }
}

std::vector<std::int64_t> int_values(const Tensor& t) {
  if (t.dtype() == kiln::i64) return t.to_vector<std::int64_t>();
  if (t.dtype() == kiln::i32) {
    const auto v = t.to_vector<std::int32_t>();
    return {v.begin(), v.end()};
  }
  throw NotMapped(fmt::format("integer values of a {} tensor", kiln::dtype_name(t.dtype())));
}

double scalar_value(const Tensor& t) {
  if (t.size() != 1) throw NotMapped("a scalar input with several elements");
  return kiln::cast(t, kiln::f64).to_vector<double>()[0];
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

kiln::DType dtype_from_onnx(std::int64_t type) {
  switch (type) {
    case 1:
      return kiln::f32;
    case 2:
      return kiln::u8;
    case 3:
      return kiln::i8;
    case 6:
      return kiln::i32;
    case 7:
      return kiln::i64;
    case 9:
      return kiln::boolean;
    case 11:
      return kiln::f64;
    case 4:
      return kiln::u16;
    case 5:
      return kiln::i16;
    case 10:
      return kiln::f16;
    case 12:
      return kiln::u32;
    case 13:
      return kiln::u64;
    case 16:
      return kiln::bf16;
    case 17:
      return kiln::f8e4m3fn;
    case 18:
      return kiln::f8e4m3fnuz;
    case 19:
      return kiln::f8e5m2;
    case 20:
      return kiln::f8e5m2fnuz;
    case 21:
      return kiln::u4;
    case 22:
      return kiln::i4;
    case 23:
      return kiln::f4e2m1fn;
    case 25:
      return kiln::u2;
    case 26:
      return kiln::i2;
    default:
      throw NotMapped(fmt::format("ONNX element type {} has no kiln dtype", type));
  }
}

Tensor move_last_axis_to(const Tensor& x, std::int64_t axis) {
  const auto rank = x.ndim();
  if (axis == rank - 1) return x;
  std::vector<std::int64_t> perm;
  for (std::int64_t k = 0; k < rank - 1; ++k) {
    if (k == axis) perm.push_back(rank - 1);
    perm.push_back(k);
  }
  return kiln::transpose(x, perm);
}

}  // namespace onnx_conformance

namespace {

using onnx_conformance::Json;
using onnx_conformance::NotMapped;
using onnx_conformance::Tensor;

/// A case's tensor: undefined for null; the .npy file as it is when `dtype` is null; else the
/// tensor of the kiln dtype named `dtype` whose carrier the file holds (onnx_node_cases.py): the
/// raw bytes as u8 for an 8-bit float, read back with kiln::bitcast; the exact values in a
/// wider dtype for the 4- and 2-bit dtypes, which kiln::cast narrows without change.
Tensor load_case_tensor(const std::filesystem::path& root, const Json& file, const Json& dtype) {
  if (file.is_null()) return Tensor();
  const Tensor carrier = kiln::io::load_npy(root / file.get<std::string>());
  if (dtype.is_null()) return carrier;
  const auto name = dtype.get<std::string>();
  for (std::size_t i = 0; i < kiln::num_dtypes; ++i) {
    const auto d = static_cast<kiln::DType>(i);
    if (kiln::dtype_name(d) != name) continue;
    const bool bytes = kiln::is_minifloat(d) && d != kiln::f4e2m1fn;  // an 8-bit float
    return bytes ? kiln::bitcast(carrier, d) : kiln::cast(carrier, d);
  }
  throw std::runtime_error("onnx_node_cases.py wrote an unknown dtype " + name);
}

/// Why `actual` differs from `expected` ("" when equal): dtype, shape, then values (exact for
/// integers and bool; |a - e| <= atol + rtol * |e| for floats, NaN equal to NaN).
std::string compare(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                    const Tensor& unspecified, std::int64_t& skipped) {
  if (actual.dtype() != expected.dtype())
    return fmt::format("dtype {} != expected {}", kiln::dtype_name(actual.dtype()),
                       kiln::dtype_name(expected.dtype()));
  if (actual.shape() != expected.shape())
    return fmt::format("shape {} != expected {}", actual.shape().to_string(),
                       expected.shape().to_string());
  std::vector<bool> skip(static_cast<std::size_t>(expected.size()), false);
  if (unspecified.defined()) {
    skip = kiln::broadcast_to(unspecified, expected.shape()).contiguous().to_vector<bool>();
    for (bool b : skip) skipped += b ? 1 : 0;
  }
  if (kiln::is_floating(expected.dtype())) {
    const auto a = kiln::cast(actual, kiln::f64).to_vector<double>();
    const auto e = kiln::cast(expected, kiln::f64).to_vector<double>();
    for (std::size_t k = 0; k < e.size(); ++k) {
      if (skip[k] || (std::isnan(e[k]) && std::isnan(a[k]))) continue;
      if (a[k] == e[k]) continue;
      if (!(std::abs(a[k] - e[k]) <= atol + rtol * std::abs(e[k])))
        return fmt::format("element {}: {} != expected {}", k, a[k], e[k]);
    }
    return {};
  }
  const auto a = kiln::cast(actual, kiln::i64).to_vector<std::int64_t>();
  const auto e = kiln::cast(expected, kiln::i64).to_vector<std::int64_t>();
  for (std::size_t k = 0; k < e.size(); ++k)
    if (!skip[k] && a[k] != e[k])
      return fmt::format("element {}: {} != expected {}", k, a[k], e[k]);
  return {};
}

/// test/data/onnx_node_exceptions.txt: "case_name  reason" per line; '#' starts a comment.
std::map<std::string, std::string> read_exceptions(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::string reason;
    std::getline(fields >> std::ws, reason);
    if (!name.empty()) out[name] = reason;
  }
  return out;
}

std::string top(const std::map<std::string, int>& counts, std::size_t n) {
  std::vector<std::pair<int, std::string>> v;
  for (const auto& [k, count] : counts) v.emplace_back(-count, k);
  std::sort(v.begin(), v.end());
  std::string out;
  for (std::size_t k = 0; k < v.size() && k < n; ++k)
    out += fmt::format("{}{} ({})", k ? ", " : "", v[k].second, -v[k].first);
  return out;
}

}  // namespace

TEST_CASE("ONNX backend node tests run on kiln", "[onnx_conformance]") {
  const std::string python = io_test::test_python("numpy, onnx");
  if (python.empty()) {
    WARN(
        "skipped: the project's Python environment (scripts/python-env.sh) with numpy and onnx "
        "is missing");
    return;
  }
  io_test::TempDir dir;
  const std::string script =
      std::string(test_paths::source_dir()) + "/test/data/onnx_node_cases.py";
  const std::string command = fmt::format("'{}' '{}' '{}'", python, script, dir.path().string());
  REQUIRE(std::system(command.c_str()) == 0);
  Json manifest;
  std::ifstream(dir / "manifest.json") >> manifest;
  REQUIRE(manifest.is_array());

  const auto table = onnx_conformance::op_table();
  const auto exceptions =
      read_exceptions(std::string(test_paths::data_dir()) + "/onnx_node_exceptions.txt");

  int single_node = 0, mapped = 0, passed = 0, excepted = 0;
  std::int64_t undefined_elements = 0;  // results ONNX's spec leaves undefined, not compared
  std::map<std::string, int> unmapped_ops, unreadable, not_mapped_reasons;
  std::vector<std::string> failures, passing_exceptions;
  std::set<std::string> mapped_names;
  for (const Json& entry : manifest) {
    ++single_node;
    const auto name = entry["name"].get<std::string>();
    const auto op = entry["op_type"].get<std::string>();
    const auto domain = entry["domain"].get<std::string>();
    const std::string key = domain == "ai.onnx" ? op : domain + "." + op;
    const auto it = table.find(key);
    if (it == table.end()) {
      ++unmapped_ops[key];
      continue;
    }
    if (!entry["unsupported"].is_null()) {
      const auto reason = entry["unsupported"].get<std::string>();
      // "input 0: dtype f16; output 0: dtype f16" counts once, as "dtype f16".
      std::set<std::string> kinds;
      for (std::size_t at = 0; at < reason.size();) {
        const auto colon = reason.find(": ", at);
        const auto end = std::min(reason.find("; ", at), reason.size());
        if (colon != std::string::npos && colon < end)
          kinds.insert(reason.substr(colon + 2, end - colon - 2));
        at = end + 2;
      }
      std::string key;
      for (const auto& k : kinds) key += (key.empty() ? "" : " + ") + k;
      ++unreadable[key];
      continue;
    }
    onnx_conformance::Case c;
    c.name = name;
    c.opset = entry["opset"].get<std::int64_t>();
    c.attributes = &entry["attributes"];
    c.root = dir.path();
    const auto& input_dtypes = entry["input_dtypes"];
    for (std::size_t k = 0; k < entry["inputs"].size(); ++k)
      c.inputs.push_back(load_case_tensor(dir.path(), entry["inputs"][k], input_dtypes[k]));
    std::vector<Tensor> expected;
    const auto& output_dtypes = entry["output_dtypes"];
    for (std::size_t k = 0; k < entry["outputs"].size(); ++k) {
      c.outputs.push_back(!entry["outputs"][k].is_null());
      expected.push_back(load_case_tensor(dir.path(), entry["outputs"][k], output_dtypes[k]));
    }
    std::string problem;
    try {
      const auto outputs = it->second(c);
      for (std::size_t k = 0; k < expected.size() && problem.empty(); ++k) {
        if (!expected[k].defined()) continue;
        if (k >= outputs.size()) throw NotMapped(fmt::format("output {} is not computed", k));
        const Tensor unspecified = k < c.unspecified.size() ? c.unspecified[k] : Tensor();
        const auto why = compare(outputs[k], expected[k], entry["rtol"].get<double>(),
                                 entry["atol"].get<double>(), unspecified, undefined_elements);
        if (!why.empty()) problem = fmt::format("output {}: {}", k, why);
      }
    } catch (const NotMapped& e) {
      ++not_mapped_reasons[op + ": " + e.what()];
      continue;
    } catch (const std::exception& e) {
      problem = fmt::format("error: {}", e.what());
    }
    ++mapped;
    mapped_names.insert(name);
    const bool listed = exceptions.count(name) != 0;
    if (problem.empty()) {
      ++passed;
      if (listed) passing_exceptions.push_back(name);
    } else if (listed) {
      ++excepted;
    } else {
      failures.push_back(fmt::format("{} ({}): {}", name, op, problem));
    }
  }

  std::vector<std::string> stale;
  for (const auto& [name, reason] : exceptions)
    if (!mapped_names.count(name)) stale.push_back(name);

  int unreadable_total = 0, not_mapped_total = 0, unmapped_total = 0;
  for (const auto& [k, n] : unreadable) unreadable_total += n;
  for (const auto& [k, n] : not_mapped_reasons) not_mapped_total += n;
  for (const auto& [k, n] : unmapped_ops) unmapped_total += n;
  std::string summary = fmt::format(
      "ONNX node-test conformance (onnx_node_cases.py):\n"
      "  single-node cases:             {}\n"
      "  op type not in the table:      {} ({} op types; top: {})\n"
      "  mapped op, tensors kiln lacks: {} (top: {})\n"
      "  mapped op, case not supported: {}\n"
      "  cases that map (and run):      {} ({:.1f}% of single-node cases; target 85%)\n"
      "  pass:                          {} ({:.1f}% of mapped; target 98%)\n"
      "  excepted (listed, failing):    {}\n"
      "  unexpected failures:           {}\n"
      "  elements ONNX leaves undefined (not compared): {}\n",
      single_node, unmapped_total, unmapped_ops.size(), top(unmapped_ops, 12), unreadable_total,
      top(unreadable, 8), not_mapped_total, mapped, 100.0 * mapped / std::max(1, single_node),
      passed, 100.0 * passed / std::max(1, mapped), excepted, failures.size(), undefined_elements);
  for (const auto& [reason, n] : not_mapped_reasons)
    summary += fmt::format("    not supported: {} ({})\n", reason, n);
  for (const auto& f : failures) summary += "    FAILED " + f + "\n";
  for (const auto& p : passing_exceptions)
    summary += "    listed in exceptions but passes: " + p + "\n";
  for (const auto& s : stale) summary += "    listed in exceptions but does not map: " + s + "\n";
  std::cout << summary << std::flush;

  INFO(summary);
  CHECK(single_node > 0);
  CHECK(failures.empty());
  CHECK(passing_exceptions.empty());
  CHECK(stale.empty());
}
