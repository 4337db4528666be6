//! attn-stats: placeholder, see the workspace README.
