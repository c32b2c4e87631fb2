# Sourced by scripts/gpu_check.sh on the GPU machine: unpacks the Debian packages that
# scripts/gpu_deps.sh put in .gpu-deps/ into .gpu-deps/root (once) and points the build and the
# run at them: PATH, LD_LIBRARY_PATH, pkg-config, CMake hints, and Open MPI's relocation
# variables (it was built for /usr). Without .gpu-deps it changes nothing, so a machine that has
# the Debian packages installed builds from the system as usual.
# shellcheck shell=bash
feast_gpu_deps=${FEAST_GPU_DEPS:-$PWD/.gpu-deps}
# nvcc: CMake finds it on PATH only.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
# NCCL (loaded at run time; its header at build time): where the toolkit has none, the copy
# pip's nvidia-nccl package installed for PyTorch.
if feast_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) && [[ -d $feast_nccl/lib ]]; then
  export LD_LIBRARY_PATH=$feast_nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [[ -f /usr/local/cuda/include/nccl.h ]] || export NCCL_ROOT=$feast_nccl
fi
# cuDNN 9 (fused attention; linked): where the toolkit has none, pip's nvidia-cudnn package.
if [[ ! -f /usr/local/cuda/include/cudnn.h ]] &&
  feast_cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null) && [[ -d $feast_cudnn/lib ]]; then
  export LD_LIBRARY_PATH=$feast_cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CUDNN_ROOT=$feast_cudnn
fi
FEAST_CMAKE_HINTS=()
if [[ -d $feast_gpu_deps/debs ]]; then
  P=$feast_gpu_deps/root
  if [[ ! -f $P/.unpacked ]]; then
    rm -rf "$P" && mkdir -p "$P"
    for deb in "$feast_gpu_deps"/debs/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$P"
      else  # no dpkg: a .deb is an ar archive holding data.tar.*
        (cd "$P" && ar p "$deb" "$(ar t "$deb" | grep '^data\.tar')" | tar -x --auto-compress -f - 2>/dev/null ||
          ar p "$deb" "$(ar t "$deb" | grep '^data\.tar')" | tar -xJf -)
      fi
    done
    # Links to absolute paths (/usr/lib/...) would leave the unpacked tree: aim them inside it.
    find "$P" -type l -lname '/*' | while read -r link; do
      [[ -e $P$(readlink "$link") ]] && ln -sfn "$P$(readlink "$link")" "$link"
    done
    mkdir -p "$P/usr/include" && tar -C "$P/usr/include" -xzf "$feast_gpu_deps/boost-crc-headers.tar.gz"
    # HDF5's compiler wrappers hold /usr paths and would mislead FindHDF5: it gets hints instead.
    rm -f "$P"/usr/bin/h5*cc* "$P"/usr/bin/h5c++* "$P"/usr/bin/h5*fc* "$P"/usr/lib/x86_64-linux-gnu/hdf5/openmpi/bin/h5*
    # Debian's alternatives would have made these links; dpkg -x does not run them.
    ln -sf mpicc.openmpi "$P/usr/bin/mpicc"; ln -sf mpic++.openmpi "$P/usr/bin/mpicxx"
    ln -sf mpirun.openmpi "$P/usr/bin/mpirun"; ln -sf orterun "$P/usr/bin/mpirun.openmpi" 2>/dev/null || true
    [[ -e $P/usr/bin/pkg-config ]] || ln -sf pkgconf "$P/usr/bin/pkg-config"
    touch "$P/.unpacked"
  fi
  lib=$P/usr/lib/x86_64-linux-gnu
  export PATH=$P/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$P/lib/x86_64-linux-gnu:$lib/openmpi/lib:$lib/hdf5/openmpi:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$P/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$P
  # Open MPI finds its components, help files and configuration under these.
  export OPAL_PREFIX=$P/usr OPAL_LIBDIR=$lib/openmpi/lib OPAL_SYSCONFDIR=$P/etc/openmpi OPAL_PKGDATADIR=$P/usr/share/openmpi
  export PMIX_INSTALL_PREFIX=$lib/pmix2
  # One node: Open MPI starts its local daemon without ssh, but refuses to start when it finds
  # no ssh or rsh to name as the agent (a bare image has neither).
  command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm_rsh_agent=false
  # Quiet about what the carried packages leave out: PSM (old InfiniPath) and PMIx's help texts.
  export OMPI_MCA_mtl=^psm PMIX_MCA_pcompress_base_silence_warning=1
  FEAST_CMAKE_HINTS=(
    -DCMAKE_PREFIX_PATH="$P/usr"
    # FindMPI misreads the relocated wrappers' include list: name the pieces instead.
    -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_HEADER_DIR="$lib/openmpi/include" -DMPI_CXX_HEADER_DIR="$lib/openmpi/include"
    -DMPI_C_LIB_NAMES=mpi -DMPI_CXX_LIB_NAMES="mpi_cxx;mpi" -DMPI_mpi_LIBRARY="$lib/openmpi/lib/libmpi.so"
    -DMPI_mpi_cxx_LIBRARY="$lib/openmpi/lib/libmpi_cxx.so"
    # HDF5's wrapper (h5pcc) was written for /usr: name the parallel build's header and library,
    # and keep FindHDF5 off any wrapper or CMake package the machine has (Ubuntu's image has the
    # serial h5cc, whose flags FindHDF5 would otherwise take): a failing wrapper makes it search.
    -DHDF5_C_COMPILER_EXECUTABLE="$(type -P false)" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON
    -DHDF5_C_INCLUDE_DIR="$P/usr/include/hdf5/openmpi" -DHDF5_hdf5_LIBRARY_RELEASE="$lib/hdf5/openmpi/libhdf5.so"
    -DFEAST_OPENBLAS_DIR="$lib/openblas-openmp" -DFEAST_OPENBLAS_INCLUDE="$P/usr/include/x86_64-linux-gnu/openblas-openmp"
    -DBoost_INCLUDE_DIR="$P/usr/include" -DBoost_NO_BOOST_CMAKE=ON
    -DZLIB_ROOT="$P/usr"
  )
fi
