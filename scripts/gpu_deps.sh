#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with network, what the GPU machine lacks to build and run the
# trainer, into .gpu-deps/ (ignored by git, carried to the GPU machine by the device tool):
# Debian's .deb files of Open MPI, parallel HDF5, OpenBLAS (OpenMP), toml++, nlohmann-json,
# PCRE2, SentencePiece and pkgconf, unpacked there by scripts/gpu_env.sh, and the few Boost
# headers Boost.CRC needs (the whole of Boost would not fit the 64 MiB a call may carry).
# The GPU machine has CUDA, CMake, ninja and a compiler but no package manager that can fetch.
# Usage: scripts/gpu_deps.sh    (then carry .gpu-deps; docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu-deps
# Runtime libraries and the development files the build reads. Left out on purpose: compilers
# (gfortran), Fortran and C++ bindings of HDF5, autotools, ssh (one node: mpirun needs none),
# documentation scripts, and -dev packages of libraries we only link through another's .so.
packages=(
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libpmix2 libhwloc15 libhwloc-plugins libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7
  libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200
  libnl-route-3-200 libnuma1 libpciaccess0 libxnvctrl0 libx11-6 libxau6 libxcb1 libxdmcp6 libxext6 libbsd0
  libmunge2 libltdl7 ocl-icd-libopencl1 libedit2 libcbor0.8 libfido2-1
  libhdf5-openmpi-dev libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libaec0 libsz2 libjpeg62-turbo
  libopenblas-openmp-dev libopenblas0-openmp libgfortran5
  libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev zlib1g-dev
  libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libsentencepiece-dev libsentencepiece0 libprotobuf-lite32
  pkgconf pkgconf-bin libpkgconf3
)
rm -rf "$dest/debs"
mkdir -p "$dest/debs"
(cd "$dest/debs" && apt-get download "${packages[@]}")
# Boost.CRC's headers: the files the preprocessor opens for <boost/crc.hpp> (and the version
# header find_package(Boost) reads).
[[ -f /usr/include/boost/crc.hpp ]] || { echo "gpu_deps: install libboost-dev first (scripts/setup.sh)"; exit 1; }
printf '#include <boost/crc.hpp>\n#include <boost/version.hpp>\n' | g++ -std=c++20 -M -x c++ - |
  tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u | sed 's|^/usr/include/||' > "$dest/boost-headers.txt"
tar -C /usr/include -czf "$dest/boost-crc-headers.tar.gz" -T "$dest/boost-headers.txt"
du -sh "$dest"
