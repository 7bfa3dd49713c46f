//! The gRPC border: thin adapters between proto messages and domain operations.
//! Proto types are used only here.

mod account;
mod batch;
pub mod convert;
mod deadline;
mod events;
mod fraud_guard;
mod handler;
mod limits;
mod messaging;
pub mod port;
pub(crate) mod schedule;
pub(crate) mod server;
mod status;
mod suppression;
mod templates;
mod verification;

pub use account::Account;
pub use deadline::StampLayer;
pub use events::Events;
pub use fraud_guard::FraudGuard;
pub use limits::{MAX_REQUEST_BYTES, TooLargeLayer};
pub use messaging::Messaging;
pub use status::{ERROR_DOMAIN, to_rpc_status};
pub use suppression::SuppressionList;
pub use templates::Templates;
pub use verification::Verification;
