// Probe: what a stream-ordered allocation costs inside a timed region when the default pool
// trims at every synchronization (release threshold 0, CUDA's default) and when it keeps memory.
#include <cstdio>
#include <chrono>
#include <cuda_runtime.h>
__global__ void touch(float* p, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) p[i] += 1.f; }
int main() {
    cudaStream_t s; cudaStreamCreate(&s);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);
    for (int keep = 0; keep < 2; ++keep) {
        unsigned long long thr = keep ? ~0ull : 0ull;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr);
        for (size_t mb : {64, 134, 268, 536}) {
            size_t n = mb * 1024 * 1024 / 4;
            float gsum = 0; double hsum = 0; int reps = 10;
            for (int r = 0; r < reps + 2; ++r) {
                cudaEventRecord(a, s);
                auto t0 = std::chrono::steady_clock::now();
                float* p; cudaMallocAsync(&p, n * 4, s);
                auto t1 = std::chrono::steady_clock::now();
                cudaMemsetAsync(p, 0, n * 4, s);
                touch<<<(n + 255) / 256, 256, 0, s>>>(p, n);
                cudaFreeAsync(p, s);
                cudaEventRecord(b, s);
                cudaEventSynchronize(b);
                float ms; cudaEventElapsedTime(&ms, a, b);
                if (r >= 2) { gsum += ms; hsum += std::chrono::duration<double, std::micro>(t1 - t0).count(); }
            }
            printf("threshold %s  %4zu MB: event-timed %8.1f us, cudaMallocAsync host %8.1f us\n", keep ? "max" : "0  ", mb, 1000 * gsum / reps, hsum / reps);
        }
    }
    return 0;
}
