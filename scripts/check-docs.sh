#!/usr/bin/env bash
# Compiles and runs every ```cpp block of docs/**/*.md against a built libkiln (see
# docs/dev/docs-code-blocks.md for the rules a block follows).
#
#   bash scripts/check-docs.sh [build-dir] [file.md ...]
#
# build-dir defaults to build/ (a release build made by `meson setup build && ninja -C build`).
# With file arguments only those pages are checked. Fails on a compile error, a non-zero exit,
# an uncaught exception, a run longer than KILN_DOCS_TIMEOUT seconds (default 120), or output
# that differs from a ```text block marked <!-- check-output -->. Environment: CXX (default
# g++), KILN_DOCS_JOBS (parallel blocks, default 2), KILN_DOCS_KEEP=1 keeps the work folder.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build=${1:-build}
[ $# -gt 0 ] && shift
build=$(cd "$build" 2>/dev/null && pwd) || { echo "check-docs: no build folder ${1:-build}"; exit 1; }
[ -e "$build/libkiln.so" ] || { echo "check-docs: $build/libkiln.so missing; build kiln first"; exit 1; }

if [ $# -gt 0 ]; then
  pages=("$@")
else
  mapfile -t pages < <(find docs -name '*.md' | sort)
fi

work=$(mktemp -d /tmp/kiln-docs.XXXXXX)
[ "${KILN_DOCS_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"

# 1. Extract. Each ```cpp block becomes src/<page>_L<line>.cpp (the line of its opening fence);
#    a block without a main() is the body of one. A ```text block right after the line
#    <!-- check-output --> is the expected standard output of the last ```cpp block before it.
for page in "${pages[@]}"; do
  stem=$(echo "${page#docs/}" | sed 's/\.md$//; s#[/.-]#_#g')
  awk -v stem="$stem" -v dir="$work/src" -v page="$page" '
    function flush() {
      path = dir "/" stem "_L" start ".cpp"
      if (body !~ /(^|\n)int main\(/)
        body = "#include <kiln/kiln.hpp>\n\nint main() {\n" body "}\n"
      printf "%s", body > path
      close(path)
      print page ":" start > (dir "/" stem "_L" start ".where")
      close(dir "/" stem "_L" start ".where")
      last = stem "_L" start
    }
    mode == "cpp" && /^```/ { flush(); mode = ""; next }
    mode == "cpp" { body = body $0 "\n"; next }
    mode == "expect" && /^```/ {
      path = dir "/" last ".expected"
      printf "%s", body > path
      close(path)
      mode = ""
      next
    }
    mode == "expect" { body = body $0 "\n"; next }
    mode == "other" && /^```/ { mode = ""; next }
    mode == "other" { next }
    /^```cpp[ \t]*$/ { mode = "cpp"; start = NR; body = ""; marked = 0; next }
    /^```(c\+\+|cc|cxx|C\+\+|CPP)[ \t]*$/ {
      print page ":" NR ": C++ code must be tagged ```cpp (it is checked)" > "/dev/stderr"
      bad = 1
    }
    /^```text[ \t]*$/ && marked {
      if (last == "") { print page ":" NR ": check-output before any cpp block" > "/dev/stderr"; bad = 1 }
      mode = "expect"; body = ""; marked = 0; next
    }
    /^```/ { mode = "other"; marked = 0; next }
    /^<!-- check-output -->[ \t]*$/ { marked = 1; next }
    /[^ \t]/ { marked = 0 }
    END {
      if (mode != "") { print page ": unterminated code block" > "/dev/stderr"; bad = 1 }
      exit bad
    }' "$page" || { echo "check-docs: bad code fences in $page"; exit 1; }
done

mapfile -t blocks < <(cd "$work/src" && ls -- *.cpp 2>/dev/null | sed 's/\.cpp$//' | sort)
echo "check-docs: ${#blocks[@]} cpp blocks in ${#pages[@]} pages"
[ ${#blocks[@]} -gt 0 ] || exit 0

# 2. A precompiled kiln.hpp (saves about half of each block's compile time).
cxx=${CXX:-g++}
# -Wno-missing-field-initializers: FunctionOptions::input_signature has no default member
# initializer, so GCC flags designated initializers such as {.name = "f"} that skip it.
flags=(-std=c++20 -O0 -Wall -Wextra -Werror -Wno-missing-field-initializers -I"$root/include"
       $(pkg-config --cflags fmt))
libs=(-L"$build" -lkiln -Wl,-rpath,"$build" $(pkg-config --libs fmt))
printf '#include <kiln/kiln.hpp>\n' >"$work/pch.hpp"
pch=()
if "$cxx" "${flags[@]}" -x c++-header "$work/pch.hpp" -o "$work/pch.hpp.gch" 2>"$work/pch.log"; then
  pch=(-include "$work/pch.hpp")
fi

# 3. Compile and run each block in its own empty folder, two at a time.
export work cxx build
export KILN_DOCS_TIMEOUT=${KILN_DOCS_TIMEOUT:-120}
export flags_text="${flags[*]} ${pch[*]}" libs_text="${libs[*]}"
run_block() {
  local b=$1 log="$work/$1.log"
  local where
  where=$(cat "$work/src/$b.where")
  # shellcheck disable=SC2086
  if ! "$cxx" $flags_text "$work/src/$b.cpp" -o "$work/$b" $libs_text >"$log" 2>&1; then
    echo "FAILED $where: compile error"
    sed 's/^/    /' "$log" | head -n 40
    return 1
  fi
  mkdir -p "$work/run-$b"
  (cd "$work/run-$b" && timeout "$KILN_DOCS_TIMEOUT" "$work/$b" >"$work/$b.out" 2>"$work/$b.err")
  local status=$?
  if [ $status -ne 0 ]; then
    echo "FAILED $where: exit status $status"
    tail -n 20 "$work/$b.out" | sed 's/^/    /'
    tail -n 20 "$work/$b.err" | sed 's/^/    /'
    return 1
  fi
  if [ -f "$work/src/$b.expected" ] && ! diff -u "$work/src/$b.expected" "$work/$b.out" >"$log"; then
    echo "FAILED $where: output differs from the <!-- check-output --> block (- page, + program)"
    sed 's/^/    /' "$log" | head -n 40
    return 1
  fi
  echo "ok $where"
}
export -f run_block
start=$SECONDS
printf '%s\n' "${blocks[@]}" | xargs -P "${KILN_DOCS_JOBS:-2}" -I{} bash -c 'run_block {}' \
  >"$work/results" 2>&1
cat "$work/results"
failed=$(grep -c '^FAILED' "$work/results")
echo "check-docs: ${#blocks[@]} blocks, $failed failed, $((SECONDS - start)) s"
[ "$failed" -eq 0 ]
