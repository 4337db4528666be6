//! A model of a ring step, for the runs no machine here can make (8 GPUs, several nodes):
//! each step computes one `L × L` block per rank (`L = S/N` rows per rank) while the next K/V
//! shard (`2·B·Hkv·L·D` elements) crosses the slowest edge of the ring. The step takes the
//! longer of the two, so communication is hidden once `L` passes the crossover
//! `L* = Hkv·bytes·F / (2·Hq·BW)` (twice that under a causal mask, whose zigzag steps hold
//! half the scores). docs/PERF.md has the table with the measured inputs.

/// What the model needs: the sustained local attention rate and the slowest ring edge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingModel {
    /// Local attention throughput, TFLOP/s (measured: our kernel on one GPU).
    pub tflops: f64,
    /// Bandwidth of the slowest ring edge, GB/s per direction (measured or the link's).
    pub link_gbps: f64,
    /// Batch.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// KV heads (only these travel).
    pub kv_heads: usize,
    /// Head dim.
    pub head_dim: usize,
    /// Bytes per element (2 for f16/bf16).
    pub elem_bytes: usize,
}

impl RingModel {
    /// Seconds of attention per ring step with `local_len` rows per rank.
    pub fn step_compute_s(&self, local_len: usize, causal: bool) -> f64 {
        let l = local_len as f64;
        let scores = if causal { l * l / 2.0 } else { l * l };
        4.0 * (self.batch * self.q_heads * self.head_dim) as f64 * scores / (self.tflops * 1e12)
    }

    /// Seconds to move one K/V shard over the slowest edge.
    pub fn step_comm_s(&self, local_len: usize) -> f64 {
        let bytes = 2 * self.batch * self.kv_heads * local_len * self.head_dim * self.elem_bytes;
        bytes as f64 / (self.link_gbps * 1e9)
    }

    /// Rows per rank at which a step's communication equals its compute.
    pub fn crossover_local_len(&self, causal: bool) -> f64 {
        let base = (self.kv_heads * self.elem_bytes) as f64 * self.tflops * 1e12
            / (2.0 * self.q_heads as f64 * self.link_gbps * 1e9);
        if causal {
            2.0 * base
        } else {
            base
        }
    }

    /// Predicted parallel efficiency on `world` ranks (1 = perfect): `N` steps of compute
    /// over `N − 1` steps of `max(compute, comm)` plus the last step, which receives nothing.
    pub fn efficiency(&self, local_len: usize, world: usize, causal: bool) -> f64 {
        let c = self.step_compute_s(local_len, causal);
        let m = self.step_comm_s(local_len);
        let n = world as f64;
        n * c / ((n - 1.0) * c.max(m) + c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> RingModel {
        RingModel {
            tflops: 610.0,
            link_gbps: 208.0,
            batch: 1,
            q_heads: 16,
            kv_heads: 16,
            head_dim: 128,
            elem_bytes: 2,
        }
    }

    #[test]
    fn at_the_crossover_comm_equals_compute() {
        for causal in [false, true] {
            let m = h200();
            let l = m.crossover_local_len(causal);
            let (c, k) = (
                m.step_compute_s(l as usize, causal),
                m.step_comm_s(l as usize),
            );
            assert!((c / k - 1.0).abs() < 1e-3, "{causal}: {c} vs {k}");
        }
    }

    #[test]
    fn hidden_communication_means_full_efficiency_and_gqa_moves_the_crossover() {
        let m = h200();
        assert!((m.efficiency(65536, 8, true) - 1.0).abs() < 1e-12);
        assert!(m.efficiency(512, 8, false) < 0.5);
        let gqa = RingModel { kv_heads: 4, ..m };
        assert!((m.crossover_local_len(false) / gqa.crossover_local_len(false) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn the_model_reproduces_the_measured_step_on_two_h200s() {
        // 2×H200, S = 131072 (L = 65536), Hq = Hkv = 16, D = 128, bf16: the send/recv of a
        // step took 2.58–2.63 ms and the compute 58 ms (docs/PERF.md, ring run 1).
        let m = h200();
        assert!((m.step_comm_s(65536) * 1e3 - 2.58).abs() < 0.1);
        assert!((m.step_compute_s(65536, false) * 1e3 - 57.7).abs() < 1.5);
    }
}
