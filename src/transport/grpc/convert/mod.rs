//! Conversions between proto messages and domain types, both ways.

mod numbers;
mod requests;
mod responses;

pub use numbers::looked_up;

pub use requests::{IntoOperation, estimate_text, page_size, voice};
pub use responses::{
    FromOutput, channel, counted_parts, estimate, json_value, reply, status, timestamp,
};
