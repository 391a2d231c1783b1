// The paths meson knows at setup time, read here alone so that no other test file's text
// holds the checkout's path (see test/meson.build).
#include "test_paths.hpp"

#include "test_paths_generated.hpp"

namespace test_paths {

const char* source_dir() { return KILN_SOURCE_DIR; }
const char* data_dir() { return KILN_TEST_DATA_DIR; }

}  // namespace test_paths
