//! attn-kernels: placeholder, see the workspace README.
