//! Conversions between proto messages and domain types, both ways.

mod requests;
mod responses;

pub use requests::{IntoOperation, voice};
pub use responses::{FromOutput, channel, json_value, reply, status, timestamp};
