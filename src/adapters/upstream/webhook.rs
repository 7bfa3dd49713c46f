//! The gateway's delivery webhook body (docs/gateway.md#webhook), parsed tolerantly like
//! every other gateway answer.

use crate::core::domain::ClientId;
use serde::Deserialize;

use super::flex;
use super::response::{StatusPayload, timestamp};
use crate::core::domain::{DeliveryReport, MAX_DURATION_SECS, Reply, ReportedStatus};
use crate::core::ports::gateway::WebhookError;

/// What a webhook adds to the status a `status` answer carries ([`StatusPayload`]).
#[derive(Deserialize)]
struct WebhookExtras {
    #[serde(deserialize_with = "flex::bool")]
    success: bool,
    #[serde(default, deserialize_with = "flex::opt_string")]
    error: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    reply: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_f64")]
    duration: Option<f64>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    request_id: Option<String>,
}

/// Parses a webhook body. The client id is 0 when the body does not carry one.
pub fn parse_webhook(body: &[u8]) -> Result<DeliveryReport, WebhookError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| WebhookError(format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(WebhookError("expected a JSON object".into()));
    }
    let b = WebhookExtras::deserialize(&value).map_err(|e| WebhookError(e.to_string()))?;
    let s = StatusPayload::deserialize(&value).map_err(|e| WebhookError(e.to_string()))?;
    // Without a status there is nothing to record, and an event without one would
    // count as final and stop reconcile for the message.
    if s.status.as_deref().is_none_or(|s| s.trim().is_empty()) {
        return Err(WebhookError("status is required".into()));
    }
    if b.duration
        .is_some_and(|d| !d.is_finite() || !(0.0..=MAX_DURATION_SECS).contains(&d))
    {
        return Err(WebhookError(format!(
            "duration must be a number of seconds from 0 to {MAX_DURATION_SECS}"
        )));
    }
    let mut replies: Vec<Reply> = s.replies.into_iter().map(Reply::from).collect();
    super::response::mark_unreadable_times(&mut replies, s.updated.as_deref());
    Ok(DeliveryReport {
        // An id msgw could never have sent (0, too large) names no message.
        client_id: s.id.and_then(|id| ClientId::new(id).ok()),
        msg_id: s.msg_id.filter(|m| !m.is_empty()),
        channel_raw: s.kind,
        status: s.status.map(ReportedStatus::new),
        success: b.success,
        error: b.error.filter(|e| !e.is_empty()),
        updated: s.updated.as_deref().and_then(timestamp),
        reply: b.reply,
        duration_secs: b.duration,
        request_id: b.request_id,
        replies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::domain::Status;

    #[test]
    fn a_time_no_client_can_represent_is_left_out_and_the_status_kept() {
        for updated in ["9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+00:00"] {
            let body = format!(
                r#"{{"success":true,"id":"2","type":"sms","status":"DELIVERED","updated":"{updated}"}}"#
            );
            let r = parse_webhook(body.as_bytes()).unwrap();
            assert_eq!(r.updated, None, "{updated}");
            assert!(r.status.is_some());
        }
        let r = parse_webhook(
            br#"{"success":true,"id":"2","status":"DELIVERED","updated":"9999-12-31T23:59:59+00:00"}"#,
        )
        .unwrap();
        assert!(r.updated.is_some(), "the last representable second is kept");
    }

    #[test]
    fn parses_every_documented_field() {
        let r = parse_webhook(
            br#"{"success":true,"id":"100500","msg_id":"123","type":"voice","status":"DELIVERED",
                 "updated":"2024-01-01T10:00:00+02:00","reply":"1","duration":12,"request_id":"abc",
                 "replies":[{"datetime":"2024-01-01T10:01:00+02:00","message":"ok"}],"extra":true}"#,
        )
        .unwrap();
        assert_eq!(r.client_id.map(ClientId::get), Some(100500));
        assert_eq!(r.msg_id.as_deref(), Some("123"));
        assert_eq!(r.status.unwrap().known, Some(Status::Delivered));
        assert_eq!(
            (r.reply.as_deref(), r.duration_secs),
            (Some("1"), Some(12.0))
        );
        assert_eq!(r.replies.len(), 1);
        assert!(r.updated.is_some());
    }

    /// Fix 45, finding 4: the ISO 8601 forms the gateway may send are read; a time given
    /// and not read marks its reply, whose time is then unknown.
    #[test]
    fn reads_iso_8601_reply_times_and_marks_unreadable_ones() {
        let body = |reply: &str, updated: &str| {
            format!(
                r#"{{"success":true,"id":"7","status":"REPLIED","updated":{updated},"replies":[{reply}]}}"#
            )
        };
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-28T10:07:22Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        for form in [
            "2026-11-28T10:07:22+0000",
            "2026-11-28T10:07:22+00",
            "20261128T100722Z",
            "2026-11-28 10:07:22",
        ] {
            let r = parse_webhook(
                body(
                    &format!(r#"{{"datetime":"{form}","message":"START"}}"#),
                    "null",
                )
                .as_bytes(),
            )
            .unwrap();
            assert_eq!(r.replies[0].datetime, Some(t), "{form}");
            assert!(!r.replies[0].time_unreadable);
        }
        let r = parse_webhook(
            body(
                r#"{"datetime":"garbage","message":"START"}"#,
                r#""2026-11-28T10:07:22Z""#,
            )
            .as_bytes(),
        )
        .unwrap();
        assert!(r.replies[0].time_unreadable && r.replies[0].datetime.is_none());
        let r = parse_webhook(
            body(r#"{"message":"START"}"#, r#""2026-11-28T10:07:22+0000""#).as_bytes(),
        )
        .unwrap();
        assert_eq!(r.updated, Some(t));
        assert!(!r.replies[0].time_unreadable);
        let r = parse_webhook(body(r#"{"message":"START"}"#, r#""garbage""#).as_bytes()).unwrap();
        assert!(
            r.replies[0].time_unreadable,
            "its time is the report's, unreadable"
        );
        let r = parse_webhook(body(r#"{"message":"START"}"#, "null").as_bytes()).unwrap();
        assert!(!r.replies[0].time_unreadable, "no time given: its arrival");
    }

    #[test]
    fn refuses_what_is_not_a_status_report() {
        for bad in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"success":"maybe"}"#,
            br#"{"success":true,"id":"abc"}"#,
            br#"{"success":true,"duration":-1}"#,
            br#"{"success":true,"id":"1","type":"sms"}"#,
            br#"{"success":true,"id":"1","status":"DELIVERED","duration":1e300}"#,
            br#"{"success":true,"id":"1","status":"DELIVERED","duration":1e400}"#,
            br#"{"success":true,"id":"1","status":"DELIVERED","duration":"1e400"}"#,
            br#"{"success":true,"id":"1","type":"sms","status":" "}"#,
        ] {
            assert!(
                parse_webhook(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
