# Every dependency comes from Debian's packages (scripts/setup.sh installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(ZLIB REQUIRED)  # CRC-32 checksums of checkpoint datasets

# Parallel HDF5 (Debian's libhdf5-openmpi-dev), found through its compiler wrapper h5pcc so
# that the serial build, which has no MPI-IO driver, is never picked up by mistake.
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "HDF5 at ${HDF5_INCLUDE_DIRS} is not the parallel (MPI-IO) build: run scripts/setup.sh "
                      "(Debian package libhdf5-openmpi-dev)")
endif()
add_library(feast_hdf5 INTERFACE)
target_include_directories(feast_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
# h5pcc lists what a static libhdf5 would need (curl, crypto, ...); the shared library needs
# none of it, so only libhdf5 itself is linked when FindHDF5 names it.
if(HDF5_C_LIBRARY_hdf5)
  target_link_libraries(feast_hdf5 INTERFACE ${HDF5_C_LIBRARY_hdf5} MPI::MPI_C)
else()
  target_link_libraries(feast_hdf5 INTERFACE ${HDF5_C_LIBRARIES} MPI::MPI_C)
endif()
target_compile_definitions(feast_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

# OpenBLAS built against OpenMP shares the OpenMP thread pool with our own loops, so BLAS calls
# and element-wise passes never oversubscribe the cores. Debian ships that build in its own
# directory; it is opened by full path there, not through the system alternative, which may
# select the pthread build.
set(FEAST_OPENBLAS_DIR "/usr/lib/x86_64-linux-gnu/openblas-openmp" CACHE PATH "OpenBLAS (OpenMP build) library dir")
set(FEAST_OPENBLAS_INCLUDE "/usr/include/x86_64-linux-gnu/openblas-openmp" CACHE PATH "OpenBLAS (OpenMP build) headers")
find_library(FEAST_OPENBLAS_LIB NAMES openblas PATHS ${FEAST_OPENBLAS_DIR} NO_DEFAULT_PATH)
if(NOT FEAST_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found in ${FEAST_OPENBLAS_DIR}: run scripts/setup.sh "
                      "(Debian package libopenblas-openmp-dev) or set FEAST_OPENBLAS_DIR")
endif()
# The path a run opens a library found at `lib` by: its soname beside it where that exists (the
# runtime package's file, so the -dev package's symlink is not needed to run), else `lib`.
function(feast_runtime_path out lib soname)
  get_filename_component(dir "${lib}" DIRECTORY)
  if(EXISTS "${dir}/${soname}")
    set(${out} "${dir}/${soname}" PARENT_SCOPE)
  else()
    set(${out} "${lib}" PARENT_SCOPE)
  endif()
endfunction()
# Not linked: backend/cpu/blas_library.cpp opens it at first use, after choosing its kernels from
# the CPU's features (OpenBLAS reads OPENBLAS_CORETYPE once, when it loads).
feast_runtime_path(FEAST_OPENBLAS_RUNTIME "${FEAST_OPENBLAS_LIB}" libopenblas.so.0)
add_library(feast_blas INTERFACE)
target_link_libraries(feast_blas INTERFACE OpenMP::OpenMP_CXX ${CMAKE_DL_LIBS})
target_include_directories(feast_blas SYSTEM INTERFACE ${FEAST_OPENBLAS_INCLUDE})
target_compile_definitions(feast_blas INTERFACE FEAST_OPENBLAS_LIB="${FEAST_OPENBLAS_RUNTIME}")

# oneDNN's sgemm does the CPU's float32 products where it is installed: it was the fastest of
# OpenBLAS, BLIS and oneDNN on a training step's products (docs/benchmarks.md, "The CPU's BLAS") and
# chooses kernels by the CPU's features. Optional (the GPU machine's build has no Debian packages):
# without it OpenBLAS does every product. Opened at run time like OpenBLAS, by its soname, so the
# runtime package (libdnnl2) is what a run needs.
option(FEAST_ONEDNN "float32 CPU products through oneDNN's sgemm where Debian's libdnnl-dev is installed" ON)
if(FEAST_ONEDNN)
  find_path(FEAST_ONEDNN_INCLUDE oneapi/dnnl/dnnl.h)
  find_library(FEAST_ONEDNN_LIB NAMES dnnl)
endif()
if(FEAST_ONEDNN AND FEAST_ONEDNN_INCLUDE AND FEAST_ONEDNN_LIB)
  file(STRINGS "${FEAST_ONEDNN_INCLUDE}/oneapi/dnnl/dnnl_version.h" _dnnl_major REGEX "define DNNL_VERSION_MAJOR ")
  string(REGEX REPLACE ".*DNNL_VERSION_MAJOR ([0-9]+).*" "\\1" _dnnl_major "${_dnnl_major}")
  feast_runtime_path(FEAST_ONEDNN_RUNTIME "${FEAST_ONEDNN_LIB}" libdnnl.so.${_dnnl_major})
  target_include_directories(feast_blas SYSTEM INTERFACE ${FEAST_ONEDNN_INCLUDE})
  target_compile_definitions(feast_blas INTERFACE FEAST_ONEDNN_LIB="${FEAST_ONEDNN_RUNTIME}")
  message(STATUS "oneDNN ${_dnnl_major}: float32 CPU products through ${FEAST_ONEDNN_RUNTIME}")
else()
  message(STATUS "oneDNN not used (FEAST_ONEDNN=${FEAST_ONEDNN}, libdnnl-dev not found): OpenBLAS does every CPU product")
endif()

# The CUDA backend (model/cuda/) needs nvcc and the toolkit's cuBLAS; with it off nothing needs
# CUDA. It is built for the A100 (sm_80) and H100/H200 (sm_90) unless CMAKE_CUDA_ARCHITECTURES
# says otherwise (scripts/gpu_check.sh builds for the GPU it runs on only).
if(FEAST_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(FEAST_WITH_CUDA ON)
  else()
    set(FEAST_WITH_CUDA OFF)
  endif()
elseif(FEAST_CUDA)
  set(FEAST_WITH_CUDA ON)
else()
  set(FEAST_WITH_CUDA OFF)
endif()
if(FEAST_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # CUDA sources are C++20 like the rest. CMake 3.25 knows nvcc's flags only up to C++17 and
  # would refuse (or drop) CUDA_STANDARD 20, so it is told the flag to pass.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "feast: CUDA backend ${FEAST_WITH_CUDA}")
# NCCL: only its header at build time (the library is loaded at run time, comm/nccl_library.h),
# from the CUDA toolkit, $NCCL_ROOT, or pip's nvidia-nccl package (scripts/gpu_env.sh finds it).
set(FEAST_WITH_NCCL OFF)
if(FEAST_WITH_CUDA)
  find_path(FEAST_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
  if(FEAST_NCCL_INCLUDE_DIR)
    set(FEAST_WITH_NCCL ON)
  endif()
endif()
message(STATUS "feast: NCCL communicator ${FEAST_WITH_NCCL}")
# cuDNN 9 for fused attention (backend/cuda/attention_cudnn.h), through the header-only
# cudnn-frontend in third_party/: from the CUDA toolkit, $CUDNN_ROOT, or pip's nvidia-cudnn
# package (scripts/gpu_env.sh finds it). Without it the CUDA backend uses its own kernels.
set(FEAST_WITH_CUDNN OFF)
if(FEAST_WITH_CUDA)
  # $CUDNN_ROOT first, so that the header and the library come from one install.
  find_path(FEAST_CUDNN_INCLUDE_DIR cudnn.h HINTS ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  # pip's nvidia-cudnn ships libcudnn.so.9 without the unversioned link.
  find_library(FEAST_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR}
               ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64 PATH_SUFFIXES lib lib64)
  if(FEAST_CUDNN_INCLUDE_DIR AND FEAST_CUDNN_LIBRARY AND EXISTS "${FEAST_CUDNN_INCLUDE_DIR}/cudnn_version.h")
    file(STRINGS "${FEAST_CUDNN_INCLUDE_DIR}/cudnn_version.h" feast_cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
    if(feast_cudnn_major MATCHES "([0-9]+)$" AND CMAKE_MATCH_1 GREATER_EQUAL 9)
      set(FEAST_WITH_CUDNN ON)
    endif()
  endif()
endif()
message(STATUS "feast: cuDNN attention ${FEAST_WITH_CUDNN} ${FEAST_CUDNN_LIBRARY}")
