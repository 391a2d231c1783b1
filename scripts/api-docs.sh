#!/usr/bin/env bash
# Builds the API reference from the public headers' doc comments with Doxygen:
#   bash scripts/api-docs.sh     ->  build-docs/api/html/index.html
# Fails (exit status 1, warnings printed) if Doxygen reports any warning, so that CI catches
# broken doc comments. Needs the Debian packages doxygen and graphviz (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v doxygen >/dev/null || { echo "api-docs: doxygen is not installed"; exit 1; }
rm -rf build-docs/api
mkdir -p build-docs
: >build-docs/doxygen-warnings.log
doxygen docs/Doxyfile
if [ -s build-docs/doxygen-warnings.log ]; then
  echo "api-docs: Doxygen warnings (build-docs/doxygen-warnings.log):"
  cat build-docs/doxygen-warnings.log
  exit 1
fi
echo "api-docs: build-docs/api/html/index.html ($(find build-docs/api/html -name '*.html' | wc -l) pages, no warnings)"
