// Per-warp clock timelines of the Hopper forward: a developer build's view of where a key
// tile's cycles go (the consumers' phases, the producer's and the transposers' waits), which
// ncu's whole-kernel counters cannot show. Compiled in only when the crate is built with
// ATTN_TIMELINE=1 (build.rs adds -DATTN_TIMELINE); otherwise every stamp is empty and the
// cubins are the release ones. src/timeline.rs reads and summarizes the buffer.
//
// What is recorded: the first kTimelineCtas CTAs of the kTimelineLaunch-th launch of each
// entry kind (FP8, ping-pong, features: bench's warm-up runs far more launches, so the
// recorded one runs at steady clocks). Lane 0 of every warp writes %clock (the SM's cycle
// counter, comparable within a CTA) at each event of each key-tile step into
// attn_timeline[kind][cta][warp][step][event], and the entry's tag into slot kTimelineEvents
// (one region per kind, since a unit's entries share the buffer).
// The stamps cost about 10 % of a launch (an address and two stores each, on a divergent
// lane-0 branch), so phases read relative to one another, not as absolute kernel times.
#pragma once
#include <cstdint>

namespace attn {
constexpr int kTimelineCtas = 4;
constexpr int kTimelineWarps = 16;
constexpr int kTimelineSteps = 96;
constexpr int kTimelineEvents = 8;
constexpr int kTimelineKinds = 8;
constexpr unsigned kTimelineLaunch = 40;
} // namespace attn

#ifdef ATTN_TIMELINE
// Global scope, so the symbols keep these names in the cubin (src/timeline.rs looks them up).
__device__ unsigned attn_timeline_launches[attn::kTimelineKinds];
__device__ unsigned attn_timeline[attn::kTimelineKinds][attn::kTimelineCtas][attn::kTimelineWarps]
                                 [attn::kTimelineSteps][attn::kTimelineEvents + 1];

namespace attn {
// Whether this CTA records: one of the first CTAs of the kind's kTimelineLaunch-th launch.
__device__ __forceinline__ bool timeline_on(int kind) {
    return blockIdx.x < kTimelineCtas && blockIdx.y == 0 && blockIdx.z == 0 &&
           *reinterpret_cast<volatile unsigned*>(&attn_timeline_launches[kind]) == kTimelineLaunch;
}
__device__ __forceinline__ void timeline_stamp(bool on, int kind, int step, int event, unsigned tag) {
    unsigned clock;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(clock)::"memory");
    if (on && (threadIdx.x & 31) == 0 && step < kTimelineSteps) {
        unsigned* row = attn_timeline[kind][blockIdx.x][threadIdx.x >> 5][step];
        row[event] = clock;
        row[kTimelineEvents] = tag;
    }
}
// Counts the kind's launches (CTA 0's first consumer thread, at its end).
__device__ __forceinline__ void timeline_count_launch(int kind) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 128)
        atomicAdd(&attn_timeline_launches[kind], 1u);
}
} // namespace attn
#define ATTN_TIMELINE_ON(kind) ::attn::timeline_on(kind)
#define ATTN_TIMELINE_STAMP(on, kind, step, event, tag) ::attn::timeline_stamp(on, kind, step, event, tag)
#define ATTN_TIMELINE_COUNT(kind) ::attn::timeline_count_launch(kind)
#else
#define ATTN_TIMELINE_ON(kind) ((void)(kind), false)
#define ATTN_TIMELINE_STAMP(on, kind, step, event, tag)                                                        \
    ((void)(on), (void)(kind), (void)(step), (void)(event), (void)(tag))
#define ATTN_TIMELINE_COUNT(kind) ((void)(kind))
#endif
