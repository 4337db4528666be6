// Compile unit: the Vᵀ pass of the FP8 forward (fp8_prep.cuh), per head dim.
#include "../fp8_prep.cuh"

#ifndef ATTN_DEBUG
ATTN_FP8_V_TRANSPOSE_ENTRY(64)
ATTN_FP8_V_TRANSPOSE_ENTRY(128)
#endif
