#!/usr/bin/env bash
# C++ compiler for manylinux_2_17 wheels (tools/build_wheel.sh --zig): zig's clang
# targeting glibc 2.17 with its own libc++ linked statically, so the engine needs neither
# a newer glibc nor the system's libstdc++. $FASTDEC_ZIG is the zig binary of the
# `ziglang` PyPI package (build_wheel.sh finds it).
# zig's clang refuses -march=x86-64 -mtune=generic (CMakeLists.txt's baseline for GCC);
# -mcpu=x86_64 is the same baseline: plain x86-64, SSE2.
args=()
for arg in "$@"; do
  case "$arg" in -march=x86-64|-mtune=generic) ;; *) args+=("$arg") ;; esac
done
exec "$FASTDEC_ZIG" c++ -target x86_64-linux-gnu.2.17 -mcpu=x86_64 "${args[@]}"
