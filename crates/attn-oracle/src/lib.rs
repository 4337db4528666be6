//! attn-oracle: placeholder, see the workspace README.
