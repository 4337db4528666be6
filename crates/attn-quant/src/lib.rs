//! attn-quant: placeholder, see the workspace README.
