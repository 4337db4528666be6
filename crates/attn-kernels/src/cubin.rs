//! The cubins build.rs embedded, and the choice of one for a device's compute capability.

use crate::catalog::{Arch, UnitKey};

/// One embedded cubin: a compile unit built for one arch.
#[derive(Debug)]
pub struct EmbeddedCubin {
    /// Compile unit ([`UnitKey::name`], e.g. `fwd_sm90a_f16_d64`).
    pub unit: &'static str,
    /// Arch as given to nvcc (`80`, `89`, `90a`).
    pub arch: &'static str,
    /// Built with the debug flags (`-G -lineinfo -DATTN_DEBUG`).
    pub debug: bool,
    /// The cubin bytes.
    pub image: &'static [u8],
    /// What `ptxas -v` printed for it.
    pub ptxas_log: &'static str,
}

mod generated {
    use super::EmbeddedCubin;
    include!(concat!(env!("OUT_DIR"), "/cubins.rs"));
}

/// Every embedded cubin (empty when the crate was built without nvcc).
pub fn embedded() -> &'static [EmbeddedCubin] {
    generated::CUBINS
}

/// The nvcc the kernels were built with, if any.
pub fn nvcc_used() -> Option<&'static str> {
    generated::NVCC
}

/// The cubin of a unit the device of compute capability (major, minor) runs: among the
/// unit's archs that run on the device ([`Arch::runs_on`]), the newest that was built.
/// `unit` is the key with any arch; the arch is chosen here.
pub fn select(
    unit: &UnitKey,
    debug: bool,
    major: i32,
    minor: i32,
) -> Option<&'static EmbeddedCubin> {
    Arch::ALL
        .iter()
        .rev()
        .filter(|a| a.runs_on(major, minor))
        .find_map(|&arch| {
            let name = UnitKey { arch, ..*unit }.name();
            embedded()
                .iter()
                .find(|c| c.unit == name && c.debug == debug)
        })
}

/// Whether the cubin arch `arch` (`90a`) runs on a device of compute capability
/// (major, minor).
pub fn parse_arch_runs_on(arch: &str, major: i32, minor: i32) -> bool {
    Arch::parse(arch).is_some_and(|a| a.runs_on(major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{units, Elem, Family};

    #[test]
    fn every_catalog_unit_is_built_when_nvcc_was_found() {
        if nvcc_used().is_none() {
            // Without nvcc the table must be empty, so launches fail with KernelsNotBuilt.
            assert!(embedded().is_empty());
            return;
        }
        let archs: Vec<Arch> = std::env::var("ATTN_CUDA_ARCHS")
            .unwrap_or_else(|_| "80;89;90a".into())
            .split([';', ','])
            .filter_map(Arch::parse)
            .collect();
        let dims: Vec<usize> = std::env::var("ATTN_HEAD_DIMS")
            .unwrap_or_default()
            .split([';', ','])
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        for unit in units(&archs, &dims) {
            assert!(
                embedded()
                    .iter()
                    .any(|c| c.unit == unit.name() && c.arch == unit.arch.nvcc_name() && !c.debug),
                "missing cubin {}",
                unit.name()
            );
        }
        // A device 9.0 gets the sm_90a cubin; 8.6 falls back to sm_80; 8.9 gets sm_89 where
        // the family has sm_89 units (the FP8 forward) and sm_80's where it has not.
        let key = |arch| UnitKey {
            family: Family::Fwd,
            arch,
            elem: Elem::F16,
            head_dim: 64,
        };
        let fp8_key = |arch| UnitKey {
            family: Family::Fp8Fwd,
            ..key(arch)
        };
        let built = |a: Arch| embedded().iter().any(|c| c.unit == key(a).name());
        let fp8_built = |a: Arch| embedded().iter().any(|c| c.unit == fp8_key(a).name());
        if built(Arch::Sm90a) {
            assert_eq!(
                select(&key(Arch::Sm80), false, 9, 0).map(|c| c.arch),
                Some("90a")
            );
        }
        if built(Arch::Sm80) {
            assert_eq!(
                select(&key(Arch::Sm90a), false, 8, 6).map(|c| c.arch),
                Some("80")
            );
        }
        assert!(!built(Arch::Sm89), "sm_89 runs sm_80's f16/bf16 forward");
        if built(Arch::Sm80) {
            assert_eq!(
                select(&key(Arch::Sm90a), false, 8, 9).map(|c| c.arch),
                Some("80")
            );
        }
        if fp8_built(Arch::Sm89) {
            assert_eq!(
                select(&fp8_key(Arch::Sm80), false, 8, 9).map(|c| c.arch),
                Some("89")
            );
        }
        assert!(select(&key(Arch::Sm90a), false, 10, 0).is_none());
    }

    #[test]
    fn archs_run_where_their_sass_runs() {
        assert!(Arch::Sm80.runs_on(8, 6) && Arch::Sm80.runs_on(8, 9));
        assert!(!Arch::Sm89.runs_on(8, 6) && Arch::Sm89.runs_on(8, 9));
        assert!(Arch::Sm90a.runs_on(9, 0) && !Arch::Sm90a.runs_on(10, 0));
        assert!(!Arch::Sm80.runs_on(9, 0));
        assert_eq!(Arch::parse("sm_90a"), Some(Arch::Sm90a));
        assert_eq!(Arch::parse("90"), None);
    }
}
