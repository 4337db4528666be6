//! Per-warp clock timelines of the Hopper forward, for profiling builds.
//!
//! Built with `ATTN_TIMELINE=1`, the Hopper forward's entries stamp `%clock` at each phase of
//! each key-tile step into a device buffer (kernels/timeline.cuh): for the first
//! [`CTAS`] CTAs of the 40th launch of each entry kind, every warp's lane 0 records its
//! events. [`read`] copies the buffers of the loaded modules back; [`summarize`] turns the
//! rows into per-role phase medians, which say where a key tile's cycles go (the consumers'
//! Q·Kᵀ wait, softmax, P·V wait, rescale; the producer's and the FP8 transposers' waits)
//! when ncu's whole-kernel counters cannot. A timeline build is about 10 % slower than a
//! release build (each stamp is a divergent lane-0 store), so phases compare with each other,
//! not with release times. Release builds carry no stamps, and [`read`] says so.
//!
//! ```
//! use attn_kernels::timeline::{summarize, TimelineRow, EVENTS};
//!
//! // Two steps of one consumer warp (warp 4) of a 128-key ping-pong entry (tag 128010).
//! let row = |step: u32, t0: u32| TimelineRow {
//!     unit: "fwdh_sm90a_f16_d128".into(),
//!     tag: 128_010,
//!     cta: 0,
//!     warp: 4,
//!     step,
//!     clocks: std::array::from_fn::<u32, EVENTS, _>(|e| t0 + 100 * e as u32),
//! };
//! let rows: Vec<TimelineRow> = (0..8).map(|s| row(s, 1000 * s)).collect();
//! let summary = summarize(&rows);
//! assert_eq!(summary[0].phases[0].1, 100); // every phase lasts 100 cycles
//! assert_eq!(summary[0].cycle, Some(1000)); // and a step 1000
//! ```

use std::fmt;

use crate::{FlashAttention, KernelError};

/// Whether this crate was built with `ATTN_TIMELINE=1` (its Hopper forward cubins then carry
/// the stamps, if nvcc built them).
pub const BUILT: bool = option_env!("ATTN_TIMELINE_BUILT").is_some();
/// The launch of each entry kind that records (kernels/timeline.cuh `kTimelineLaunch`,
/// counting from 0).
pub const RECORDED_LAUNCH: usize = 40;
/// CTAs recorded per launch (kernels/timeline.cuh `kTimelineCtas`).
pub const CTAS: usize = 4;
/// Warps per CTA with a row (`kTimelineWarps`).
pub const WARPS: usize = 16;
/// Entry kinds, each with its own region of the buffer (`kTimelineKinds`: FP8 × ping-pong ×
/// features), since a unit's entries share it.
pub const KINDS: usize = 8;
/// Key-tile steps recorded per warp (`kTimelineSteps`).
pub const STEPS: usize = 96;
/// Events per step (`kTimelineEvents`); each row also holds the entry's tag.
pub const EVENTS: usize = 8;

/// The buffer's symbol in a timeline build's cubins.
const SYMBOL: &str = "attn_timeline";

/// One warp's stamps for one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineRow {
    /// The kernel unit (cubin) the row came from.
    pub unit: String,
    /// The entry: `BN·1000 + 100·FP8 + 10·ping-pong + features`.
    pub tag: u32,
    /// The CTA (`blockIdx.x`, below [`CTAS`]).
    pub cta: u32,
    /// The warp: 0 the TMA producer, 1–3 FP8's transposers (idle otherwise), 4 on consumers.
    pub warp: u32,
    /// The step: the consumer's key tile (counted across a walking CTA's items), the
    /// producer's or transposer's stage.
    pub step: u32,
    /// `%clock` at each event; 0 where the warp has no such event.
    pub clocks: [u32; EVENTS],
}

/// What a warp does, by its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Warp 0: loads Q, K, V by TMA.
    Producer,
    /// Warps 1–3 of an FP8 entry: transpose V.
    Transposer,
    /// Warps 4 on: the consumer warpgroups' warps.
    Consumer,
}

impl Role {
    fn of(warp: u32) -> Self {
        match warp {
            0 => Role::Producer,
            1..=3 => Role::Transposer,
            _ => Role::Consumer,
        }
    }

    /// The phases between consecutive events (events `i` to `i + 1`).
    pub fn phases(self) -> &'static [&'static str] {
        match self {
            Role::Producer => &["wait for a free K slot", "wait for a free V slot"],
            Role::Transposer => &["wait for V's load", "wait for a free Vᵀ slot", "transpose"],
            Role::Consumer => &[
                "ping-pong turn",
                "wait for K",
                "wait for V",
                "issue + Q·Kᵀ",
                "softmax",
                "wait for P·V",
                "rescale O + convert P",
            ],
        }
    }
}

/// Median phase lengths of one role of one entry over its recorded steps.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSummary {
    /// The unit.
    pub unit: String,
    /// The entry's tag (see [`TimelineRow::tag`]).
    pub tag: u32,
    /// Whose phases.
    pub role: Role,
    /// Steps that went into the medians (the first two and last two of each warp are left
    /// out: the pipeline fills and drains there).
    pub steps: usize,
    /// (phase, median cycles).
    pub phases: Vec<(&'static str, u32)>,
    /// Median cycles from one step's start to the next (consumers).
    pub cycle: Option<u32>,
}

impl fmt::Display for PhaseSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (bn, fp8, pp, feat) = (
            self.tag / 1000,
            self.tag / 100 % 10,
            self.tag / 10 % 10,
            self.tag % 10,
        );
        write!(
            f,
            "{} BN {bn}{}{}{} {:?} ({} steps):",
            self.unit,
            if fp8 == 1 { " fp8" } else { "" },
            if pp == 1 { " ping-pong" } else { "" },
            if feat == 1 { " features" } else { "" },
            self.role,
            self.steps
        )?;
        if let Some(c) = self.cycle {
            write!(f, " step {c} cycles;")?;
        }
        for (name, cycles) in &self.phases {
            write!(f, " {name} {cycles}")?;
        }
        Ok(())
    }
}

/// Copies the timeline buffers of every module this launcher's device has loaded. Run the
/// launches first (the buffer fills on the 40th launch of each entry kind); rows never
/// written are left out.
///
/// # Errors
/// [`KernelError::TimelineNotBuilt`] when no loaded module has the buffer (a release build,
/// or no Hopper forward launched yet); driver errors from the copy.
pub fn read(gpu: &FlashAttention) -> Result<Vec<TimelineRow>, KernelError> {
    let stream = gpu.stream();
    let mut rows = Vec::new();
    let mut found = false;
    for (unit, module) in gpu.cache().loaded_modules()? {
        let Ok(view) = module.get_global(SYMBOL, stream) else {
            continue;
        };
        found = true;
        let bytes: Vec<u8> = stream
            .clone_dtoh(&view)
            .map_err(crate::launch::driver("reading a timeline buffer"))?;
        rows.extend(parse(&unit, &bytes));
    }
    if !found {
        return Err(KernelError::TimelineNotBuilt);
    }
    Ok(rows)
}

/// The rows of one module's buffer (`[KINDS][CTAS][WARPS][STEPS][EVENTS + 1]` little-endian
/// u32; the kind is in the tag).
fn parse(unit: &str, bytes: &[u8]) -> Vec<TimelineRow> {
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut rows = Vec::new();
    for (i, rec) in words.chunks_exact(EVENTS + 1).enumerate() {
        let tag = rec[EVENTS];
        if tag == 0 {
            continue; // never written
        }
        let (cta, rest) = ((i / (WARPS * STEPS)) % CTAS, i % (WARPS * STEPS));
        let mut clocks = [0u32; EVENTS];
        clocks.copy_from_slice(&rec[..EVENTS]);
        rows.push(TimelineRow {
            unit: unit.to_string(),
            tag,
            cta: cta as u32,
            warp: (rest / STEPS) as u32,
            step: (rest % STEPS) as u32,
            clocks,
        });
    }
    rows
}

/// Per (unit, entry, role): the median of each phase over every warp's inner steps, and the
/// consumers' median step length. `%clock` wraps at 2³², so differences are taken modulo it.
pub fn summarize(rows: &[TimelineRow]) -> Vec<PhaseSummary> {
    use std::collections::BTreeMap;
    // (unit, tag, role) -> (cta, warp) -> rows by step
    type Warps<'a> = BTreeMap<(u32, u32), BTreeMap<u32, &'a TimelineRow>>;
    let mut groups: BTreeMap<(String, u32, Role), Warps> = BTreeMap::new();
    for r in rows {
        groups
            .entry((r.unit.clone(), r.tag, Role::of(r.warp)))
            .or_default()
            .entry((r.cta, r.warp))
            .or_default()
            .insert(r.step, r);
    }
    let mut out = Vec::new();
    for ((unit, tag, role), warps) in groups {
        let names = role.phases();
        let mut samples: Vec<Vec<u32>> = vec![Vec::new(); names.len()];
        let mut cycles = Vec::new();
        let mut steps = 0;
        for by_step in warps.values() {
            let inner: Vec<&TimelineRow> = by_step.values().copied().collect();
            let inner = if inner.len() > 4 {
                &inner[2..inner.len() - 2]
            } else {
                &inner[..]
            };
            steps += inner.len();
            for r in inner {
                for (k, s) in samples.iter_mut().enumerate() {
                    s.push(r.clocks[k + 1].wrapping_sub(r.clocks[k]));
                }
                if role == Role::Consumer {
                    if let Some(next) = by_step.get(&(r.step + 1)) {
                        cycles.push(next.clocks[0].wrapping_sub(r.clocks[0]));
                    }
                }
            }
        }
        out.push(PhaseSummary {
            unit,
            tag,
            role,
            steps,
            phases: names
                .iter()
                .copied()
                .zip(samples.iter_mut().map(|s| median(s)))
                .collect(),
            cycle: (!cycles.is_empty()).then(|| median(&mut cycles)),
        });
    }
    out
}

fn median(v: &mut [u32]) -> u32 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tag: u32, cta: u32, warp: u32, step: u32, clocks: [u32; EVENTS]) -> TimelineRow {
        TimelineRow {
            unit: "u".into(),
            tag,
            cta,
            warp,
            step,
            clocks,
        }
    }

    #[test]
    fn parse_places_rows_by_cta_warp_and_step_and_skips_unwritten_ones() {
        let mut words = vec![0u32; KINDS * CTAS * WARPS * STEPS * (EVENTS + 1)];
        let at = |kind: usize, cta: usize, warp: usize, step: usize| {
            (((kind * CTAS + cta) * WARPS + warp) * STEPS + step) * (EVENTS + 1)
        };
        let i = at(4, 2, 5, 17);
        words[i..i + EVENTS].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        words[i + EVENTS] = 192_100;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let rows = parse("fwdh", &bytes);
        assert_eq!(
            rows,
            vec![TimelineRow {
                unit: "fwdh".into(),
                tag: 192_100,
                cta: 2,
                warp: 5,
                step: 17,
                clocks: [1, 2, 3, 4, 5, 6, 7, 8],
            }]
        );
    }

    #[test]
    fn summaries_take_medians_of_inner_steps_per_role_across_clock_wraparound() {
        let mut rows = Vec::new();
        // A consumer warp: 8 steps of 1000 cycles starting just below 2^32; the phases last
        // 10, 20, …, 70 cycles, but the first two and last two steps (left out) are slower.
        let start = u32::MAX - 2500;
        for step in 0..8u32 {
            let slow = if !(2..6).contains(&step) { 9 } else { 1 };
            let mut c = [0u32; EVENTS];
            let mut t = start.wrapping_add(1000 * step);
            for (e, slot) in c.iter_mut().enumerate() {
                *slot = t;
                t = t.wrapping_add(10 * (e as u32 + 1) * slow);
            }
            rows.push(row(128_010, 0, 4, step, c));
        }
        // The producer of the same entry: waits of 5 and 7 cycles.
        for step in 0..6u32 {
            rows.push(row(
                128_010,
                0,
                0,
                step,
                [100 * step, 100 * step + 5, 100 * step + 12, 0, 0, 0, 0, 0],
            ));
        }
        let s = summarize(&rows);
        assert_eq!(s.len(), 2);
        let producer = s.iter().find(|p| p.role == Role::Producer).unwrap();
        assert_eq!(producer.steps, 2);
        assert_eq!(
            producer.phases[..2],
            [("wait for a free K slot", 5), ("wait for a free V slot", 7)]
        );
        let consumer = s.iter().find(|p| p.role == Role::Consumer).unwrap();
        assert_eq!(consumer.steps, 4);
        assert_eq!(consumer.cycle, Some(1000));
        let lengths: Vec<u32> = consumer.phases.iter().map(|p| p.1).collect();
        assert_eq!(lengths, [10, 20, 30, 40, 50, 60, 70]);
        assert!(consumer.to_string().contains("ping-pong"), "{consumer}");
    }
}
