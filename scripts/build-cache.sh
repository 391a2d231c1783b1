# Sourced by scripts/test.sh and scripts/fuzz.sh: settings for ccache, which meson puts in front
# of the compiler when it finds it at setup time (scripts/install-deps.sh installs it). The test
# command builds kiln four times (optimized, ASan+UBSan, TSan, fuzzing) and takes most of its
# time compiling; with the cache kept in the user's cache folder, a later run on the same machine
# recompiles only what changed. A fresh machine compiles everything, as without it.
# - CCACHE_BASEDIR: paths under the checkout are hashed relative to it, so two clones in
#   different folders share entries.
# - CCACHE_NOHASHDIR: debug builds (-g) otherwise hash the build folder's absolute path too; the
#   cost is that a hit keeps the compile folder of the build that stored it in its debug info.
# - CCACHE_SLOPPINESS: the test files share a precompiled header (test/pch/), which ccache
#   caches only when told that its defines and time macros need not be checked; nothing in kiln
#   uses __DATE__ or __TIME__. Header mtimes are not checked either: a fresh clone's files are
#   all new, and ccache hashes their contents anyway.
# - CCACHE_MAXSIZE: the four builds took 0.4 GB of cache (compressed); this leaves ample room.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-16G}
