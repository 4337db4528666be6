//! The cubins build.rs embedded, and the choice of one for a device's compute capability.

/// One embedded cubin: a compile unit built for one arch.
#[derive(Debug)]
pub struct EmbeddedCubin {
    /// Compile unit (`fwd_f16_d64`).
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

/// Parses `80`, `89`, `90a` into (major, minor, arch-specific).
pub(crate) fn parse_arch(arch: &str) -> Option<(i32, i32, bool)> {
    let (num, specific) = match arch.strip_suffix('a') {
        Some(n) => (n, true),
        None => (arch, false),
    };
    let v: i32 = num.parse().ok()?;
    Some((v / 10, v % 10, specific))
}

/// Picks the cubin of `unit` that runs on a device of compute capability (major, minor):
/// same major, minor ≤ the device's (SASS is compatible within a major version), and an
/// arch-specific `a` build only on exactly its own arch; the newest such arch wins.
pub fn select(unit: &str, debug: bool, major: i32, minor: i32) -> Option<&'static EmbeddedCubin> {
    embedded()
        .iter()
        .filter(|c| c.unit == unit && c.debug == debug)
        .filter_map(|c| parse_arch(c.arch).map(|a| (a, c)))
        .filter(|((ma, mi, specific), _)| {
            *ma == major
                && if *specific {
                    *mi == minor
                } else {
                    *mi <= minor
                }
        })
        .max_by_key(|((_, mi, specific), _)| (*mi, *specific))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parsing() {
        assert_eq!(parse_arch("80"), Some((8, 0, false)));
        assert_eq!(parse_arch("90a"), Some((9, 0, true)));
        assert_eq!(parse_arch("x"), None);
    }

    #[test]
    fn every_unit_is_built_for_every_default_arch_when_nvcc_was_found() {
        if nvcc_used().is_none() {
            // Without nvcc the table must be empty, so launches fail with KernelsNotBuilt.
            assert!(embedded().is_empty());
            return;
        }
        let archs = std::env::var("ATTN_CUDA_ARCHS").unwrap_or_else(|_| "80;89;90a".into());
        for unit in [
            "fwd_f16_d64",
            "fwd_f16_d128",
            "fwd_bf16_d64",
            "fwd_bf16_d128",
            "fwd_fp8_f16_d64",
            "fwd_fp8_f16_d128",
            "fwd_fp8_bf16_d64",
            "fwd_fp8_bf16_d128",
            "fp8_prep",
        ] {
            for arch in archs.split([';', ',']).filter(|a| !a.is_empty()) {
                assert!(
                    embedded()
                        .iter()
                        .any(|c| c.unit == unit && c.arch == arch && !c.debug),
                    "missing cubin {unit} sm_{arch}"
                );
            }
        }
        // A device 9.0 gets the sm_90a cubin; 8.6 falls back to sm_80; 8.9 gets sm_89.
        if embedded().iter().any(|c| c.arch == "90a") {
            assert_eq!(
                select("fwd_f16_d64", false, 9, 0).map(|c| c.arch),
                Some("90a")
            );
        }
        if embedded().iter().any(|c| c.arch == "80") {
            assert_eq!(
                select("fwd_f16_d64", false, 8, 6).map(|c| c.arch),
                Some("80")
            );
        }
        assert!(select("fwd_f16_d64", false, 10, 0).is_none());
    }
}
