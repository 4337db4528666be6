// Measures tanh.approx.f32's relative error against tanh in f64, beside roundings of the exact
// tanh to 11 and 10 significant bits (attn-ref's emulate::round_tanh keeps 11).
#include <cstdio>
#include <cstdint>
#include <cmath>
__device__ float tanh_approx(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ float round_bits(float t, int keep) { // keep stored bits
    unsigned drop = 23 - keep; unsigned b = __float_as_uint(t); unsigned half = 1u << (drop - 1); unsigned lsb = (b >> drop) & 1;
    return __uint_as_float((b + half - 1 + lsb) & ~((1u << drop) - 1));
}
// stats[k][0..3]: sum |rel|, sum rel, max |rel|, count; k = 0 approx, 1 round11, 2 round10
__global__ void probe(double* stats, float lo, float hi, long long n, int bins, double* hist) {
    double s[3][3] = {};
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float x = lo + (hi - lo) * (float)((double)i / (double)n);
        double e = tanh((double)x);
        if (e == 0.0) continue;
        float v[3] = {tanh_approx(x), round_bits((float)e, 10), round_bits((float)e, 9)};
        for (int k = 0; k < 3; ++k) {
            double r = ((double)v[k] - e) / fabs(e);
            s[k][0] += fabs(r); s[k][1] += r; s[k][2] = fmax(s[k][2], fabs(r));
        }
        // signed relative error of approx, binned over x
        int bi = (int)((x - lo) / (hi - lo) * bins); if (bi >= 0 && bi < bins) atomicAdd(&hist[bi], ((double)v[0] - e) / fabs(e));
    }
    for (int k = 0; k < 3; ++k) { atomicAdd(&stats[4*k], s[k][0]); atomicAdd(&stats[4*k+1], s[k][1]);
        unsigned long long* m = (unsigned long long*)&stats[4*k+2]; atomicMax(m, __double_as_longlong(s[k][2])); }
}
int main() {
    const long long n = 1ll << 26; const int bins = 40;
    const float ranges[][2] = {{-10.f, 10.f}, {0.f, 0.5f}, {0.5f, 2.f}, {2.f, 5.f}};
    for (auto& rg : ranges) {
        double *stats, *hist; cudaMallocManaged(&stats, 12 * sizeof(double)); cudaMallocManaged(&hist, bins * sizeof(double));
        for (int i = 0; i < 12; ++i) stats[i] = 0; for (int i = 0; i < bins; ++i) hist[i] = 0;
        probe<<<1024, 256>>>(stats, rg[0], rg[1], n, bins, hist); cudaDeviceSynchronize();
        const char* names[3] = {"tanh.approx", "round to 11 bits", "round to 10 bits"};
        printf("x in [%g, %g], %lld points\n", rg[0], rg[1], n);
        for (int k = 0; k < 3; ++k) printf("  %-18s mean|rel| %.3e (2^%.2f)  mean rel %+.3e  max|rel| %.3e (2^%.2f)\n", names[k],
            stats[4*k]/n, log2(stats[4*k]/n), stats[4*k+1]/n, stats[4*k+2], log2(stats[4*k+2]));
        printf("  tanh.approx mean signed rel error per bin of x:\n   ");
        for (int b = 0; b < bins; ++b) printf(" %+.1e", hist[b] / (n / bins)); printf("\n");
        cudaFree(stats); cudaFree(hist);
    }
    return 0;
}
