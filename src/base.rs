//! What every layer uses and that knows nothing of msgw's domain: metrics and how
//! options read their values.

pub mod metrics;
pub(crate) mod parse;
