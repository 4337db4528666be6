// Compile unit: forward kernels for bf16 storage, head dim 128, every named config.
#include "../fwd_kernel.cuh"
#include "../configs.cuh"

ATTN_FWD_CONFIGS_D128(bf16, __nv_bfloat16)
ATTN_FWD_SPLIT_CONFIGS(bf16, __nv_bfloat16, 128)
