//! Conversions between proto messages and domain types, both ways.

mod requests;
mod responses;

pub use requests::{IntoOperation, estimate_text, page_size, voice};
pub use responses::{
    FromOutput, channel, counted_parts, estimate, json_value, reply, status, timestamp,
};
