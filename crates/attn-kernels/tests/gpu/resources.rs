//! Registers and static shared memory the driver reports for every loaded kernel, against
//! what ptxas printed for the embedded cubin. Kernel names come from the catalog.

use std::collections::BTreeSet;

use attn_kernels::{
    catalog::{self, Arch, Elem, Family},
    configs_for, cubin, Dtype, KernelMode,
};

use crate::{fp8, gpu, DTYPES};

fn dtype(elem: Elem) -> Dtype {
    match elem {
        Elem::F16 => Dtype::F16,
        Elem::Bf16 => Dtype::Bf16,
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn resources_match_the_ptxas_report() {
    let gpu = gpu();
    let (ma, mi) = gpu.compute_capability();
    // Every f16/bf16 forward unit of the catalog (one per dtype and head-dim bucket: the arch
    // is chosen for the device) that this build embedded.
    let units: BTreeSet<_> = catalog::units(&[], &[])
        .into_iter()
        .filter(|u| u.family == Family::Fwd)
        .map(|u| catalog::UnitKey {
            arch: Arch::Sm80,
            ..u
        })
        .collect();
    let mut checked = 0;
    for unit in units {
        let Some(image) = cubin::select(&unit, false, ma, mi) else {
            println!("{}: not built for this GPU, skipped", unit.name());
            continue;
        };
        let arch = Arch::parse(image.arch).expect("a known arch");
        let (dt, d) = (dtype(unit.elem), unit.head_dim);
        // The configs this arch's cubin instantiates, and this device can hold.
        let built: Vec<_> = catalog::fwd_tiles_for(arch, d)
            .into_iter()
            .map(|e| e.tile)
            .collect();
        for cfg in configs_for(d) {
            if !built.contains(&cfg) || cfg.smem_bytes(d) > gpu.max_smem_per_block() {
                continue;
            }
            for causal in [false, true] {
                let mode = if causal {
                    KernelMode::Causal
                } else {
                    KernelMode::Full
                };
                let name = catalog::fwd_entry_name(&unit, &cfg, mode, false);
                let regs = ptxas_registers(image.ptxas_log, &name)
                    .unwrap_or_else(|| panic!("{name} not in the ptxas log of {}", image.unit));
                let res = gpu.resources(dt, d, &cfg, causal).unwrap();
                assert_eq!(
                    res.registers as usize, regs,
                    "{name}: driver vs ptxas registers"
                );
                assert_eq!(
                    res.static_smem, 0,
                    "{name}: the kernels use dynamic shared memory only"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 16, "{checked}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn resources_fp8_match_the_ptxas_report() {
    let gpu = gpu();
    let (ma, mi) = gpu.compute_capability();
    let mut checked = 0;
    for out in DTYPES {
        for d in attn_kernels::FP8_HEAD_DIMS {
            let unit = attn_kernels::fp8::fp8_unit(out, d).unwrap();
            let Some(fp8_image) = cubin::select(&unit, false, ma, mi) else {
                println!("{}: not built for this GPU, skipped", unit.name());
                continue;
            };
            for cfg in fp8::fits(&gpu, d) {
                for variant in fp8::variants(&gpu) {
                    if variant == attn_kernels::Fp8Variant::Wgmma && d > 128 {
                        continue; // the one-warpgroup wgmma kernel has no D = 256
                    }
                    // The Hopper engine's FP8 entries live in its own unit.
                    let image = if variant == attn_kernels::Fp8Variant::Hopper {
                        let unit = attn_kernels::fp8::hopper_fp8_unit(out, d);
                        cubin::select(&unit, false, ma, mi).expect("the variant is available")
                    } else {
                        fp8_image
                    };
                    for causal in [false, true] {
                        let name =
                            attn_kernels::fp8::fp8_kernel_name(out, d, &cfg, causal, variant);
                        let regs = ptxas_registers(image.ptxas_log, &name)
                            .unwrap_or_else(|| panic!("{name} not in the ptxas log"));
                        let res = gpu.fp8_resources(out, d, &cfg, causal, variant).unwrap();
                        assert_eq!(res.registers as usize, regs, "{name}");
                        assert_eq!(res.static_smem, 0, "{name}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 32, "{checked}");
}

/// "Used N registers" of `kernel` in a ptxas -v log.
fn ptxas_registers(log: &str, kernel: &str) -> Option<usize> {
    let mut in_kernel = false;
    for line in log.lines() {
        if line.contains("Compiling entry function") || line.contains("Function properties for") {
            in_kernel = line.contains(&format!("'{kernel}'")) || line.trim_end().ends_with(kernel);
        }
        if in_kernel {
            if let Some(rest) = line.split("Used ").nth(1) {
                return rest.split_whitespace().next()?.parse().ok();
            }
        }
    }
    None
}
