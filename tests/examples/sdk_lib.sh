# Shared by the SDK tests (sourced): where the installed SDK lives, failing
# with the output kept, and building an example out of tree both ways.
set -uo pipefail
src=${TRIB_SOURCE_DIR:?} bin=${TRIB_BINARY_DIR:?}
prefix=$bin/sdk-prefix
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
CC=${CC:-cc} CMAKE=${CMAKE:-cmake}
name=$(basename "$0" .sh)
work=$bin/sdk-work/$name
rm -rf "$work" && mkdir -p "$work"

fail() {
  echo "FAIL ($name): $*" >&2
  for f in "$work"/*.out; do [ -s "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done >&2
  exit 1
}

# build_example NAME: $work/pc/NAME (the README's cc + pkg-config command,
# run in the example's folder) and $work/cmake/NAME (its CMakeLists).
build_example() {
  local ex=$1
  [ -f "$prefix/lib/pkgconfig/tributary.pc" ] || fail "no SDK in $prefix (test_sdk_install sets it up)"
  mkdir -p "$work/pc"
  (cd "$src/examples/$ex" && "$CC" $ex.c $(pkg-config --cflags --libs tributary) -o "$work/pc/$ex") \
    >"$work/build-pc.out" 2>&1 || fail "pkg-config build of examples/$ex"
  "$CMAKE" -S "$src/examples/$ex" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$CC" >"$work/build-cmake.out" 2>&1 &&
    "$CMAKE" --build "$work/cmake" >>"$work/build-cmake.out" 2>&1 || fail "CMake build of examples/$ex"
  [ -x "$work/cmake/$ex" ] || fail "CMake build made no $ex"
}

# run_example BUILD NAME [ARGS...]: runs it with a time limit into $work/BUILD.out.
run_example() {
  local b=$1 ex=$2; shift 2
  timeout -k 5 240 "$work/$b/$ex" "$@" >"$work/$b.out" 2>&1 || fail "$b/$ex $* exited $?"
}

# first_last FILE REGEX: the first and last numbers captured by REGEX's
# group 1 (sed -E) over FILE's lines.
first_last() {
  local v; v=$(sed -nE "s/$2/\\1/p" "$1")
  [ -n "$v" ] || return 1
  echo "$(echo "$v" | head -1) $(echo "$v" | tail -1)"
}
