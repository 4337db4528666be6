// The named kernel configs (BLOCK_M, BLOCK_N, stages, warps) per head dim, instantiated by
// the units. Each warp owns BLOCK_M / warps = 16 or 32 whole query rows. src/config.rs holds
// the same lists; a test checks that they agree. The last column says whether the debug
// build (-G, tile dumps) also instantiates the config: debug cubins are ~15x larger, so only
// one config of each rows-per-warp kind (16 and 32) is built there. D = 128 has no 32-rows-per-warp config with
// BLOCK_N = 64: it needs more than 255 registers and spills.
#pragma once
#define ATTN_FWD_CONFIGS_D64(TNAME, T)              \
    ATTN_FWD_CONFIG(TNAME, T, 64, 32, 64, 2, 2, 0)     \
    ATTN_FWD_CONFIG(TNAME, T, 64, 64, 64, 2, 4, 1)     \
    ATTN_FWD_CONFIG(TNAME, T, 64, 128, 64, 2, 8, 0)    \
    ATTN_FWD_CONFIG(TNAME, T, 64, 64, 64, 3, 4, 0)     \
    ATTN_FWD_CONFIG(TNAME, T, 64, 128, 64, 2, 4, 0)    \
    ATTN_FWD_CONFIG(TNAME, T, 64, 128, 32, 2, 4, 1)    \
    ATTN_FWD_CONFIG(TNAME, T, 64, 64, 64, 2, 2, 0)     \
    ATTN_FWD_CONFIG(TNAME, T, 64, 128, 128, 2, 8, 0)

#define ATTN_FWD_CONFIGS_D128(TNAME, T)             \
    ATTN_FWD_CONFIG(TNAME, T, 128, 32, 64, 2, 2, 0)    \
    ATTN_FWD_CONFIG(TNAME, T, 128, 64, 64, 2, 4, 1)    \
    ATTN_FWD_CONFIG(TNAME, T, 128, 128, 64, 2, 8, 0)   \
    ATTN_FWD_CONFIG(TNAME, T, 128, 64, 64, 3, 4, 0)    \
    ATTN_FWD_CONFIG(TNAME, T, 128, 128, 32, 2, 4, 1)   \
    ATTN_FWD_CONFIG(TNAME, T, 128, 128, 128, 2, 8, 0)

// Split-KV variants (release only): the configs the chooser uses when a grid is too small to
// fill the chip. src/config.rs: SPLIT_CONFIGS.
#define ATTN_FWD_SPLIT_CONFIGS(TNAME, T, D)          \
    ATTN_FWD_SPLIT_CONFIG(TNAME, T, D, 32, 64, 2, 2) \
    ATTN_FWD_SPLIT_CONFIG(TNAME, T, D, 64, 64, 2, 4)
