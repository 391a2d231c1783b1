// A tiny program that uses kiln as an installed library.
#include <kiln/kiln.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>

int main() {
  kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  kiln::Tensor y = kiln::matmul(x, x) + 1.f;
  const auto v = y.to_vector<float>();
  fmt::print("{}\n", y);
  // Files: a safetensors and an npz round trip (kiln links libzip and nlohmann_json privately).
  const auto dir = std::filesystem::temp_directory_path();
  const auto st = dir / fmt::format("kiln-consumer-{}.safetensors", ::getpid());
  const auto npz = dir / fmt::format("kiln-consumer-{}.npz", ::getpid());
  kiln::io::save_safetensors(st, {{"y", y}});
  kiln::io::save_npz(npz, {{"y", y}}, true);
  const bool files_ok = kiln::io::load_safetensors(st).at("y").to_vector<float>() == v &&
                        kiln::io::load_npz(npz).at("y").to_vector<float>() == v;
  std::filesystem::remove(st);
  std::filesystem::remove(npz);
  // [[1,2],[3,4]]^2 + 1 = [[8,11],[16,23]]
  return v == std::vector<float>{8.f, 11.f, 16.f, 23.f} && files_ok ? 0 : 1;
}
