// Compile unit: FP8 (E4M3) forward kernels writing bf16, head dim 128, every FP8 config.
#include "../fwd_fp8_kernel.cuh"

ATTN_FP8_CONFIGS(bf16, __nv_bfloat16, 128)
