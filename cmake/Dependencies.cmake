# Every dependency comes from Debian's packages (scripts/setup.sh installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

# OpenBLAS built against OpenMP shares the OpenMP thread pool with our own loops, so BLAS calls
# and element-wise passes never oversubscribe the cores. Debian ships that build in its own
# directory; we link it by full path (the build RPATH then points there, not at the
# pthread build that the system alternative may select).
set(FEAST_OPENBLAS_DIR "/usr/lib/x86_64-linux-gnu/openblas-openmp" CACHE PATH "OpenBLAS (OpenMP build) library dir")
set(FEAST_OPENBLAS_INCLUDE "/usr/include/x86_64-linux-gnu/openblas-openmp" CACHE PATH "OpenBLAS (OpenMP build) headers")
find_library(FEAST_OPENBLAS_LIB NAMES openblas PATHS ${FEAST_OPENBLAS_DIR} NO_DEFAULT_PATH)
if(NOT FEAST_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found in ${FEAST_OPENBLAS_DIR}: run scripts/setup.sh "
                      "(Debian package libopenblas-openmp-dev) or set FEAST_OPENBLAS_DIR")
endif()
add_library(feast_blas INTERFACE)
target_link_libraries(feast_blas INTERFACE ${FEAST_OPENBLAS_LIB} OpenMP::OpenMP_CXX)
target_include_directories(feast_blas SYSTEM INTERFACE ${FEAST_OPENBLAS_INCLUDE})

# The CUDA backend (filled by a later issue) only needs nvcc to be found; with it off nothing
# needs CUDA.
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
    set(CMAKE_CUDA_ARCHITECTURES 90)
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
