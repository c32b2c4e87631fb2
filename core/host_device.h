// FEAST_HD marks scalar math that both backends share (GELU, the AdamW update, the RNG): the
// CPU tests then exercise the GPU's formulas too.
#pragma once

#if defined(__CUDACC__)
#define FEAST_HD __host__ __device__ __forceinline__
#else
#define FEAST_HD inline
#endif
