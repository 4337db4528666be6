// Compile unit: forward kernels for f16 storage, head dim 64, every named config.
#include "../fwd_kernel.cuh"
#include "../configs.cuh"

ATTN_FWD_CONFIGS_D64(f16, __half)
ATTN_FWD_SPLIT_CONFIGS(f16, __half, 64)
