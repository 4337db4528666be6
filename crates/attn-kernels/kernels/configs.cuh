// The named kernel configs (BLOCK_M, BLOCK_N, stages; warps = BLOCK_M / 16), instantiated by
// every unit. src/config.rs holds the same list; a test checks that the two agree.
#pragma once
#define ATTN_FWD_ALL_CONFIGS(TNAME, T, D)          \
    ATTN_FWD_CONFIG(TNAME, T, D, 32, 64, 2)        \
    ATTN_FWD_CONFIG(TNAME, T, D, 64, 64, 2)        \
    ATTN_FWD_CONFIG(TNAME, T, D, 128, 64, 2)       \
    ATTN_FWD_CONFIG(TNAME, T, D, 64, 64, 3)
