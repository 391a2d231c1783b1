#pragma once
// Where this checkout's sources and test data are (test_paths.cpp, from meson's generated
// test_paths_generated.hpp).

namespace test_paths {

/// The checkout's top folder.
const char* source_dir();
/// test/data of the checkout.
const char* data_dir();

}  // namespace test_paths
