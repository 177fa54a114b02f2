// Portability macros for code compiled by both the host compiler and nvcc.
// Element-wise and reduction bodies carry GRIDNN_HD so the CPU backend loops over
// exactly the functions the CUDA backend launches (docs/design.md §3).
#pragma once

#if defined(__CUDACC__)
#define GRIDNN_HD __host__ __device__
#define GRIDNN_INLINE __forceinline__
#else
#define GRIDNN_HD
#define GRIDNN_INLINE inline
#endif
