// The headers nearly every test file includes, compiled once per build into a precompiled
// header (test/meson.build): Catch2's single header and kiln's public one are most of the
// parsing of a small test file, and the test suite is built three times by scripts/test.sh.
// main.cpp, which defines CATCH_CONFIG_MAIN before including Catch2, is built without it.
// (No include guard: the compiler reads it once per test file, forced in front by meson.)

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <vector>
