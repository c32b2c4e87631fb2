# One place for compiler flags shared by every feast target.
add_library(feast_options INTERFACE)
target_compile_options(feast_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
if(FEAST_WERROR)
  target_compile_options(feast_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                                 $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
if(FEAST_NATIVE)
  target_compile_options(feast_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  target_compile_options(feast_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=x86-64-v2>)
endif()
# -O3 lets GCC vectorise the element-wise loops; no -ffast-math: the CPU path is the
# deterministic reference and must keep IEEE semantics. Two flags that change no value:
# -fno-trapping-math (we never enable floating-point traps) lets GCC if-convert the clamps in
# fast_exp, so the exponentials of softmax, cross-entropy and GELU vectorise; -fno-math-errno
# (nothing reads errno) lets sqrt compile to the vector instruction, so AdamW vectorises.
target_compile_options(feast_options INTERFACE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O3>
                       $<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math -fno-math-errno>)
