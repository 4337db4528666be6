//! Appending new K/V rows to a paged KV cache (`kernels/kv_append.cuh`), vLLM's
//! `reshape_and_cache`: the step of a serving loop that writes the keys and values of the new
//! tokens into their pages before attention reads them through the block table
//! ([`crate::seqs`]).
//!
//! Layouts (views with any strides, last dim contiguous, as everywhere in this crate):
//! - new rows K, V: `[tokens, Hkv, D]`, seen as `[1, Hkv, tokens, D]` tensors
//!   (`Tensor::contiguous(view, [1, hkv, tokens, d], Layout::Bshd)`);
//! - caches: `[num_blocks, page_size, Hkv, D]`, seen as `[num_blocks, Hkv, page_size, D]`
//!   (the paged forward's view);
//! - `slots`: one i32 per token, `page · page_size + row`. A negative slot is padding and
//!   writes nothing. Device-resident slots cannot be checked without a host sync: one past
//!   the cache (`≥ num_blocks · page_size`) writes nothing either, so a corrupt slot never
//!   writes outside the cache. With the host copy ([`Indices::with_host`]) such a slot is a
//!   typed error before launch instead.
//!
//! An E4M3 cache ([`KvCache::E4m3`]) is written quantized: `code = encode(x / scale)`,
//! rounding to nearest even and saturating to ±448, bit for bit attn-quant's
//! `Fp8Format::encode_f32` of the f32 quotient; the scales are per KV head (`[Hkv]`) or one
//! per tensor (`[1]`), the dequantization scales the FP8 attention kernels take.

use cudarc::driver::{CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

use crate::{
    catalog::{self, Arch, Family, UnitKey},
    config::elem_of,
    launch::driver,
    seqs::Indices,
    tensor::{check_tensor, ranges_overlap, Strides},
    FlashAttention, KernelError, StorageType, Tensor, TensorMut,
};

/// The compile unit of the append kernels (one per arch; the newest that runs is picked).
pub const KV_APPEND_UNIT: UnitKey = UnitKey {
    family: Family::KvAppend,
    arch: Arch::Sm80,
    elem: catalog::Elem::F16,
    head_dim: 0,
};

/// The paged caches an append writes.
#[derive(Debug)]
pub enum KvCache<'a, T> {
    /// Caches in the new rows' type.
    Same {
        /// Keys `[num_blocks, Hkv, page_size, D]`.
        k: TensorMut<'a, T>,
        /// Values, like `k`.
        v: TensorMut<'a, T>,
    },
    /// E4M3 caches (codes) with their dequantization scales, `[Hkv]` or `[1]` each.
    E4m3 {
        /// Key codes `[num_blocks, Hkv, page_size, D]`.
        k: TensorMut<'a, u8>,
        /// Value codes, like `k`.
        v: TensorMut<'a, u8>,
        /// Key scales: `x ≈ decode(code) · scale`.
        k_scale: CudaView<'a, f32>,
        /// Value scales.
        v_scale: CudaView<'a, f32>,
    },
}

/// One append: the new rows, where they go, and the caches.
#[derive(Debug)]
pub struct AppendKv<'a, T> {
    /// New keys `[1, Hkv, tokens, D]`.
    pub k: Tensor<'a, T>,
    /// New values, like `k`.
    pub v: Tensor<'a, T>,
    /// One slot per token (`page · page_size + row`; negative: skip).
    pub slots: Indices<'a>,
    /// The caches written.
    pub cache: KvCache<'a, T>,
}

/// Kernel parameters; the layout of `attn::KvAppendParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvAppendParams {
    src_head: [i64; 2],
    src_row: [i64; 2],
    cache_page: [i64; 2],
    cache_head: [i64; 2],
    cache_row: [i64; 2],
    tokens: i32,
    kv_heads: i32,
    head_dim: i32,
    page_size: i32,
    num_slots: i32,
    scale_per_head: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel's parameter struct.
unsafe impl cudarc::driver::DeviceRepr for KvAppendParams {}

/// One tensor of an append, flattened for validation without a device: dims, strides,
/// view length (elements), element bytes, start address.
pub(crate) type Desc = ([usize; 4], Strides, usize, usize, u64);

/// Validates an append and returns its kernel parameters (pure: unit-tested without a
/// device). `scales`: the E4M3 caches' scale lengths and addresses.
pub(crate) fn plan_append(
    k: Desc,
    v: Desc,
    k_cache: Desc,
    v_cache: Desc,
    slots: (usize, Option<&[i32]>),
    scales: Option<((usize, u64), (usize, u64))>,
) -> Result<KvAppendParams, KernelError> {
    let [one, hkv, tokens, d] = k.0;
    let invalid =
        |tensor: &'static str, reason: String| KernelError::InvalidTensor { tensor, reason };
    if one != 1 {
        return Err(invalid(
            "K",
            format!("new rows are one [1, Hkv, tokens, D] tensor, got batch {one}"),
        ));
    }
    if d == 0 || d % 8 != 0 || d > 256 {
        return Err(KernelError::UnsupportedHeadDim {
            head_dim: d,
            supported: "multiples of 8 up to 256 for the KV append",
        });
    }
    let [num_blocks, cache_heads, page_size, cache_d] = k_cache.0;
    if cache_heads != hkv || cache_d != d || num_blocks == 0 || page_size == 0 {
        return Err(invalid(
            "K cache",
            format!(
                "dims {:?}: a cache [num_blocks, Hkv, page_size, D] with the new rows' Hkv {hkv} and D {d}, and at least one page of one row",
                k_cache.0
            ),
        ));
    }
    let num_slots = num_blocks
        .checked_mul(page_size)
        .filter(|&n| n <= i32::MAX as usize)
        .ok_or(KernelError::IndexOverflow("num_blocks · page_size"))?;
    let mut inputs = Vec::new();
    for (name, t) in [("K", k), ("V", v)] {
        let c = check_tensor(name, k.0, t.0, t.1, t.2, t.3, t.4, false)?;
        inputs.push((name, t.4, (c.extent * t.3) as u64));
    }
    let mut outputs: Vec<(&'static str, u64, u64)> = Vec::new();
    for (name, t) in [("K cache", k_cache), ("V cache", v_cache)] {
        let c = check_tensor(name, k_cache.0, t.0, t.1, t.2, t.3, t.4, true)?;
        let bytes = (c.extent * t.3) as u64;
        for &(input, a, l) in inputs.iter().chain(&outputs) {
            if ranges_overlap(t.4, bytes, a, l) {
                return Err(KernelError::Overlap {
                    output: name,
                    input,
                });
            }
        }
        outputs.push((name, t.4, bytes));
    }
    let (slots_len, host) = slots;
    if slots_len != tokens {
        return Err(invalid(
            "slots",
            format!("{slots_len} slots for {tokens} tokens: one slot per token"),
        ));
    }
    if let Some(host) = host {
        if host.len() != tokens {
            return Err(invalid(
                "slots (host copy)",
                format!("{} entries for {tokens} tokens", host.len()),
            ));
        }
        if let Some((t, &s)) = host
            .iter()
            .enumerate()
            .find(|(_, &s)| s >= 0 && s as usize >= num_slots)
        {
            return Err(invalid(
                "slots",
                format!(
                    "token {t} goes to slot {s}, past the cache's {num_slots} (num_blocks {num_blocks} · page_size {page_size}); negative slots are padding"
                ),
            ));
        }
    }
    let mut scale_per_head = 0;
    if let Some(((kl, ka), (vl, va))) = scales {
        for (name, len, addr) in [("K scales", kl, ka), ("V scales", vl, va)] {
            if len != 1 && len != hkv {
                return Err(invalid(
                    name,
                    format!("{len} scales: one per KV head ({hkv}) or one for the tensor"),
                ));
            }
            if outputs
                .iter()
                .any(|&(_, a, l)| ranges_overlap(addr, (len * 4) as u64, a, l))
            {
                return Err(KernelError::Overlap {
                    output: "the caches",
                    input: name,
                });
            }
        }
        if kl != vl {
            return Err(invalid(
                "V scales",
                format!("{vl} scales but the K scales have {kl}: use one granularity"),
            ));
        }
        scale_per_head = i32::from(kl == hkv && hkv > 1);
    }
    let i = |x: usize| x as i64;
    Ok(KvAppendParams {
        src_head: [i(k.1.head), i(v.1.head)],
        src_row: [i(k.1.row), i(v.1.row)],
        cache_page: [i(k_cache.1.batch), i(v_cache.1.batch)],
        cache_head: [i(k_cache.1.head), i(v_cache.1.head)],
        cache_row: [i(k_cache.1.row), i(v_cache.1.row)],
        tokens: i32::try_from(tokens).map_err(|_| KernelError::IndexOverflow("tokens"))?,
        kv_heads: hkv as i32,
        head_dim: d as i32,
        page_size: page_size as i32,
        num_slots: num_slots as i32,
        scale_per_head,
    })
}

impl FlashAttention {
    /// Writes the new K/V rows into their cache slots on this launcher's stream (see the
    /// module documentation). Everything is validated first; on error nothing is written.
    /// No host synchronization, allocation or copy: the launch can be captured in a CUDA
    /// graph with the decode step that follows it.
    pub fn append_kv<T: StorageType>(&self, args: AppendKv<'_, T>) -> Result<(), KernelError> {
        let AppendKv {
            k,
            v,
            slots,
            mut cache,
        } = args;
        let stream = self.stream();
        let eb = std::mem::size_of::<T>();
        let mut guards = Vec::new();
        let (kp, g) = k.view().device_ptr(stream);
        guards.push(g);
        let (vp, g) = v.view().device_ptr(stream);
        guards.push(g);
        let (sp, g) = slots.device.device_ptr(stream);
        guards.push(g);
        let desc = |t: &Tensor<'_, T>, addr| (t.dims(), t.strides(), t.view().len(), eb, addr);
        let (kd, vd) = (desc(&k, kp), desc(&v, vp));
        let (e4m3, kc, vc, kcd, vcd, scales, ks, vs) = match &mut cache {
            KvCache::Same { k, v } => {
                let (kdims, kst, klen) = (k.dims(), k.strides(), k.view_len());
                let (vdims, vst, vlen) = (v.dims(), v.strides(), v.view_len());
                let (kc, g) = k.view_mut().device_ptr_mut(stream);
                guards.push(g);
                let (vc, g) = v.view_mut().device_ptr_mut(stream);
                guards.push(g);
                (
                    false,
                    kc,
                    vc,
                    (kdims, kst, klen, eb, kc),
                    (vdims, vst, vlen, eb, vc),
                    None,
                    0u64,
                    0u64,
                )
            }
            KvCache::E4m3 {
                k,
                v,
                k_scale,
                v_scale,
            } => {
                let (kdims, kst, klen) = (k.dims(), k.strides(), k.view_len());
                let (vdims, vst, vlen) = (v.dims(), v.strides(), v.view_len());
                let (kc, g) = k.view_mut().device_ptr_mut(stream);
                guards.push(g);
                let (vc, g) = v.view_mut().device_ptr_mut(stream);
                guards.push(g);
                let (ks, g) = k_scale.device_ptr(stream);
                guards.push(g);
                let (vs, g) = v_scale.device_ptr(stream);
                guards.push(g);
                (
                    true,
                    kc,
                    vc,
                    (kdims, kst, klen, 1, kc),
                    (vdims, vst, vlen, 1, vc),
                    Some(((k_scale.len(), ks), (v_scale.len(), vs))),
                    ks,
                    vs,
                )
            }
        };
        let params = plan_append(kd, vd, kcd, vcd, (slots.device.len(), slots.host), scales)?;
        if params.tokens == 0 {
            return Ok(());
        }
        let (f, _) = self.function(
            &KV_APPEND_UNIT,
            &catalog::kv_append_entry_name(elem_of(T::DTYPE), e4m3),
            false,
            0,
        )?;
        let mut b = stream.launch_builder(&f);
        b.arg(&kp)
            .arg(&vp)
            .arg(&kc)
            .arg(&vc)
            .arg(&sp)
            .arg(&ks)
            .arg(&vs)
            .arg(&params);
        // SAFETY: the arguments match ATTN_KV_APPEND_ENTRY (k, v, k_cache, v_cache, slots,
        // k_scale, v_scale, KvAppendParams by value). `plan_append` proved the new rows and
        // the caches lie inside their views with 16-byte-aligned starts and strides (the
        // kernel's 16-byte loads and 8/16-byte stores), that the caches name distinct
        // locations and overlap neither each other, the new rows nor the scales, that there
        // is one slot per token, and that the scales hold 1 or Hkv floats (read only by the
        // E4M3 entries; null otherwise). The kernel skips slots outside [0, num_blocks ·
        // page_size), so a device slot never addresses outside the caches. The grid is one
        // CTA per token. The guards keep every buffer's stream ordering until after the launch.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (params.tokens as u32, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(driver("launching the KV append"))?;
        drop(guards);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    fn desc(dims: [usize; 4], layout: Layout, eb: usize, addr: u64) -> Desc {
        let st = layout.strides(dims);
        (dims, st, dims.iter().product(), eb, addr)
    }

    #[test]
    fn plans_an_append_and_refuses_what_would_write_wrongly() {
        let (hkv, tokens, d, blocks, ps) = (4, 5, 64, 6, 16);
        let new = |addr| desc([1, hkv, tokens, d], Layout::Bshd, 2, addr);
        let cache = |addr, eb| desc([blocks, hkv, ps, d], Layout::Bshd, eb, addr);
        let mb = 1 << 20;
        let ok = plan_append(
            new(0),
            new(mb),
            cache(2 * mb, 2),
            cache(3 * mb, 2),
            (tokens, Some(&[0, 17, -1, 95, 3])),
            None,
        )
        .unwrap();
        assert_eq!(ok.num_slots, 96);
        assert_eq!(ok.cache_page, [(ps * hkv * d) as i64; 2]);
        assert_eq!(ok.cache_row, [(hkv * d) as i64; 2]);
        assert_eq!(ok.src_row, [(hkv * d) as i64; 2]);
        // A slot past the cache (host copy), a wrong slot count.
        assert!(plan_append(
            new(0),
            new(mb),
            cache(2 * mb, 2),
            cache(3 * mb, 2),
            (tokens, Some(&[0, 1, 2, 96, 3])),
            None
        )
        .is_err());
        assert!(plan_append(
            new(0),
            new(mb),
            cache(2 * mb, 2),
            cache(3 * mb, 2),
            (4, None),
            None
        )
        .is_err());
        // Caches that overlap each other or the new rows.
        assert!(matches!(
            plan_append(
                new(0),
                new(mb),
                cache(2 * mb, 2),
                cache(2 * mb + 64, 2),
                (tokens, None),
                None
            ),
            Err(KernelError::Overlap { .. })
        ));
        assert!(matches!(
            plan_append(
                new(0),
                new(mb),
                cache(16, 2),
                cache(3 * mb, 2),
                (tokens, None),
                None
            ),
            Err(KernelError::Overlap { .. })
        ));
        // A cache of another head count, a head dim the kernel's chunks cannot cover.
        let other = desc([blocks, hkv + 1, ps, d], Layout::Bshd, 2, 2 * mb);
        assert!(plan_append(
            new(0),
            new(mb),
            other,
            cache(3 * mb, 2),
            (tokens, None),
            None
        )
        .is_err());
        let odd = |addr| desc([1, hkv, tokens, 60], Layout::Bshd, 2, addr);
        assert!(matches!(
            plan_append(
                odd(0),
                odd(mb),
                cache(2 * mb, 2),
                cache(3 * mb, 2),
                (tokens, None),
                None
            ),
            Err(KernelError::UnsupportedHeadDim { .. })
        ));
        // E4M3: scales per head or per tensor, the same for K and V.
        let e4 = |kl, vl| {
            plan_append(
                new(0),
                new(mb),
                cache(2 * mb, 1),
                cache(3 * mb, 1),
                (tokens, None),
                Some(((kl, 4 * mb), (vl, 5 * mb))),
            )
        };
        assert_eq!(e4(hkv, hkv).unwrap().scale_per_head, 1);
        assert_eq!(e4(1, 1).unwrap().scale_per_head, 0);
        assert!(e4(3, 3).is_err());
        assert!(e4(1, hkv).is_err());
    }
}
