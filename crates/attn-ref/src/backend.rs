//! The reference as an [`Attention`] backend.

use crate::{reference, Attention, AttnOutput, BackendError, Problem};

/// The f64 reference ([`reference::forward`]) behind the [`Attention`] trait, so tests,
/// the oracle and the gate can run it like any kernel. Inputs are f32; the f64 results
/// are narrowed to f32 on return.
///
/// ```
/// use attn_ref::{Attention, AttnShape, Causal, Problem, ReferenceBackend};
/// let shape = AttnShape::self_attention(1, 1, 2, 2)?;
/// let problem = Problem::new(shape, Causal::TopLeft);
/// let x = [1.0f32, 0.0, 0.0, 1.0];
/// let out = ReferenceBackend.forward(&problem, &x, &x, &x)?;
/// assert_eq!(ReferenceBackend.name(), "reference-f64");
/// assert_eq!(&out.o[..2], &[1.0, 0.0]); // row 0 sees only key 0
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReferenceBackend;

impl Attention for ReferenceBackend {
    fn name(&self) -> String {
        "reference-f64".to_string()
    }

    fn forward(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, BackendError> {
        Ok(reference::forward(problem, q, k, v)?.to_f32())
    }
}
