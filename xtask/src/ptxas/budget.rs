//! The committed resource budget (`crates/attn-kernels/ptxas-budget.json`) and its check.
//!
//! Release kernels must not spill and must not use a stack; each kernel must match at least
//! one rule (a new kernel without a budget is itself a violation), and every rule that matches
//! caps its registers and static shared memory.

use std::fmt;
use std::path::Path;

use anyhow::Context;
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::KernelReport;

/// The budget file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Free-form explanation kept in the file.
    #[serde(default, rename = "$comment")]
    pub comment: Option<String>,
    /// Caps that hold for every release kernel.
    pub release: ReleaseLimits,
    /// Per-kernel caps.
    pub kernels: Vec<KernelRule>,
}

/// Caps on every release kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLimits {
    /// Spill bytes (stores + loads) allowed per kernel.
    pub max_spill_bytes: u64,
    /// Stack bytes allowed per kernel.
    pub max_stack_bytes: u64,
}

/// Caps for the kernels whose symbol or demangled name matches `pattern`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRule {
    /// Glob over the symbol or the demangled name: `*` any run of characters, `?` one.
    pub pattern: String,
    /// Restricts the rule to one target (`sm_90a`); all targets when absent.
    #[serde(default)]
    pub arch: Option<String>,
    /// Registers per thread.
    pub max_registers: u32,
    /// Static shared memory bytes per block.
    pub max_smem: u64,
    /// Overrides the release spill limit for matching kernels (needs a `why`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_spill_bytes: Option<u64>,
    /// Overrides the release stack limit for matching kernels (needs a `why`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stack_bytes: Option<u64>,
    /// Why these numbers (occupancy target, tile sizes).
    #[serde(default)]
    pub why: Option<String>,
}

/// One broken limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Kernel (demangled).
    pub kernel: String,
    /// Target.
    pub arch: String,
    /// Compile unit.
    pub unit: String,
    /// What is over which limit.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}, {}]: {}",
            self.kernel, self.arch, self.unit, self.what
        )
    }
}

/// Turns a glob into an anchored regex (`*` → `.*`, `?` → `.`, the rest literal).
fn glob_regex(glob: &str) -> anyhow::Result<Regex> {
    let mut re = String::from("^");
    for part in glob.split_inclusive(['*', '?']) {
        let (literal, wildcard) = match part.chars().last() {
            Some('*') => (&part[..part.len() - 1], ".*"),
            Some('?') => (&part[..part.len() - 1], "."),
            _ => (part, ""),
        };
        re.push_str(&regex::escape(literal));
        re.push_str(wildcard);
    }
    re.push('$');
    Regex::new(&re).with_context(|| format!("budget pattern `{glob}`"))
}

impl Budget {
    /// Reads and validates the budget file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the ptxas budget {}", path.display()))?;
        let budget: Budget = serde_json::from_str(&text)
            .with_context(|| format!("parsing the ptxas budget {}", path.display()))?;
        for rule in &budget.kernels {
            glob_regex(&rule.pattern)?;
        }
        Ok(budget)
    }

    /// Checks release reports; returns every violation (empty = within budget) and the
    /// patterns that matched no kernel (stale rules, worth a look but not a failure).
    pub fn check(&self, kernels: &[KernelReport]) -> anyhow::Result<(Vec<Violation>, Vec<String>)> {
        let rules = self
            .kernels
            .iter()
            .map(|r| Ok((r, glob_regex(&r.pattern)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut used = vec![false; rules.len()];
        let mut violations = Vec::new();
        for k in kernels {
            let r = &k.report;
            let mut violation = |what: String| {
                violations.push(Violation {
                    kernel: r.kernel.clone(),
                    arch: r.arch.clone(),
                    unit: k.unit.clone(),
                    what,
                })
            };
            let matching: Vec<usize> = rules
                .iter()
                .enumerate()
                .filter(|(_, (rule, re))| {
                    rule.arch.as_deref().is_none_or(|a| a == r.arch)
                        && (re.is_match(&r.symbol) || re.is_match(&r.kernel))
                })
                .map(|(i, _)| i)
                .collect();
            let spill_limit = matching
                .iter()
                .filter_map(|&i| rules[i].0.max_spill_bytes)
                .max()
                .unwrap_or(self.release.max_spill_bytes);
            let stack_limit = matching
                .iter()
                .filter_map(|&i| rules[i].0.max_stack_bytes)
                .max()
                .unwrap_or(self.release.max_stack_bytes);
            let spills = r.spill_stores + r.spill_loads;
            if spills > spill_limit {
                violation(format!(
                    "spills {} bytes ({} stores, {} loads) > {} allowed",
                    spills, r.spill_stores, r.spill_loads, spill_limit
                ));
            }
            if r.stack > stack_limit {
                violation(format!("stack {} bytes > {} allowed", r.stack, stack_limit));
            }
            let matched = !matching.is_empty();
            for &i in &matching {
                let rule = rules[i].0;
                used[i] = true;
                if r.registers > rule.max_registers {
                    violation(format!(
                        "registers {} > {} (rule `{}`)",
                        r.registers, rule.max_registers, rule.pattern
                    ));
                }
                if r.smem > rule.max_smem {
                    violation(format!(
                        "static smem {} bytes > {} (rule `{}`)",
                        r.smem, rule.max_smem, rule.pattern
                    ));
                }
            }
            if !matched {
                violation(format!(
                    "no budget rule matches symbol `{}`: add one to the budget file",
                    r.symbol
                ));
            }
        }
        let stale = rules
            .iter()
            .zip(&used)
            .filter(|(_, used)| !**used)
            .map(|((rule, _), _)| match &rule.arch {
                Some(a) => format!("{} ({a})", rule.pattern),
                None => rule.pattern.clone(),
            })
            .collect();
        Ok((violations, stale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptxas::parse::ResourceReport;

    fn kernel(
        symbol: &str,
        arch: &str,
        registers: u32,
        smem: u64,
        spills: u64,
        stack: u64,
    ) -> KernelReport {
        KernelReport {
            unit: "f16_d64.cu".into(),
            report: ResourceReport {
                kernel: symbol.into(),
                symbol: symbol.into(),
                arch: arch.into(),
                registers,
                barriers: 1,
                smem,
                cmem: Default::default(),
                stack,
                spill_stores: spills,
                spill_loads: spills,
            },
        }
    }

    fn budget() -> Budget {
        serde_json::from_str(
            r#"{"release": {"max_spill_bytes": 0, "max_stack_bytes": 0},
                "kernels": [
                  {"pattern": "attn_fwd_*", "max_registers": 128, "max_smem": 49152},
                  {"pattern": "attn_fwd_*_d128", "arch": "sm_90a", "max_registers": 96, "max_smem": 49152},
                  {"pattern": "old_kernel?", "max_registers": 1, "max_smem": 1}
                ]}"#,
        )
        .expect("budget json")
    }

    #[test]
    fn globs_are_anchored_and_literal() {
        let re = glob_regex("attn_fwd_*_d?4").expect("glob");
        assert!(re.is_match("attn_fwd_f16_d64"));
        assert!(!re.is_match("xattn_fwd_f16_d64"));
        assert!(!re.is_match("attn_fwd_f16_d128"));
        assert!(glob_regex("a.b").expect("glob").is_match("a.b"));
        assert!(!glob_regex("a.b").expect("glob").is_match("axb"));
    }

    #[test]
    fn within_budget_passes_and_reports_stale_rules() {
        let kernels = [
            kernel("attn_fwd_f16_d64", "sm_80", 128, 49152, 0, 0),
            kernel("attn_fwd_f16_d128", "sm_90a", 96, 100, 0, 0),
        ];
        let (violations, stale) = budget().check(&kernels).expect("check");
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(stale, vec!["old_kernel?".to_string()]);
    }

    #[test]
    fn every_violation_is_named() {
        let kernels = [
            kernel("attn_fwd_f16_d128", "sm_90a", 100, 60000, 8, 16),
            kernel("mystery", "sm_80", 10, 0, 0, 0),
        ];
        let (violations, _) = budget().check(&kernels).expect("check");
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 6, "{text:#?}");
        assert!(text[0].contains("spills 16 bytes"));
        assert!(text[1].contains("stack 16 bytes"));
        // The sm_90a rule applies on top of the generic one: 100 > 96 but not > 128.
        assert!(text.iter().any(|t| t.contains("registers 100 > 96")));
        assert!(!text.iter().any(|t| t.contains("> 128")));
        assert_eq!(
            text.iter()
                .filter(|t| t.contains("static smem 60000"))
                .count(),
            2
        );
        assert!(text[5].starts_with("mystery [sm_80, f16_d64.cu]: no budget rule"));
    }

    #[test]
    fn committed_budget_file_is_valid() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/attn-kernels/ptxas-budget.json");
        let budget = Budget::load(&path).expect("the committed budget parses");
        assert_eq!(budget.release.max_spill_bytes, 0);
        assert_eq!(budget.release.max_stack_bytes, 0);
        assert!(!budget.kernels.is_empty());
    }
}
