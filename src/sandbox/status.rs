//! Message status values (the gateway's complete list: docs/gateway.md#message-statuses).

pub const ACCEPTED: &str = "ACCEPTED";
pub const ROUTING: &str = "ROUTING";
pub const DELIVERED: &str = "DELIVERED";
pub const READ: &str = "READ";
pub const REPLIED: &str = "REPLIED";
pub const UNDELIVERABLE: &str = "UNDELIVERABLE";
pub const EXPIRED: &str = "EXPIRED";
pub const REJECTED: &str = "REJECTED";

/// The status constant named `name`, if the sandbox uses it.
pub fn known(name: &str) -> Option<&'static str> {
    [
        ACCEPTED,
        ROUTING,
        DELIVERED,
        READ,
        REPLIED,
        UNDELIVERABLE,
        EXPIRED,
        REJECTED,
    ]
    .into_iter()
    .find(|s| *s == name)
}

/// Whether `status` is a successful final state (webhook `success: true`).
pub fn is_success(status: &str) -> bool {
    matches!(status, DELIVERED | READ | REPLIED | "PARTIALLY DELIVERED")
}

/// The webhook `error` text of a failed final state.
pub fn failure_reason(status: &str) -> Option<&'static str> {
    match status {
        UNDELIVERABLE => Some("Message could not be delivered to the subscriber"),
        EXPIRED => Some("Message lifetime expired before delivery"),
        REJECTED => Some("Message rejected by the operator"),
        _ => None,
    }
}

/// Current time as RFC 3339 with an explicit `+00:00` offset, like the gateway's
/// own timestamps (which always carry a numeric offset).
pub fn now_rfc3339() -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    match stamp.strip_suffix('Z') {
        Some(base) => format!("{base}+00:00"),
        None => stamp,
    }
}
