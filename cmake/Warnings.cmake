# One place for compiler flags shared by every feast target.
add_library(feast_options INTERFACE)
target_compile_options(feast_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
if(FEAST_WERROR)
  target_compile_options(feast_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(FEAST_NATIVE)
  target_compile_options(feast_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
# -O3 lets GCC vectorise the element-wise loops; no -ffast-math: the CPU path is the
# deterministic reference and must keep IEEE semantics.
target_compile_options(feast_options INTERFACE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O3>)
