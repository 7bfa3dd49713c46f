//! Scheduled sends at the gRPC border: a send request's `send_at` checked, as its
//! operation's facts say whether it can be scheduled at all. Core keeps the parsed
//! operation in its own form (core/schedule/kept/); [`read_earlier_form`] reads the
//! requests earlier versions of msgw kept (a `BatchItem` without its `send_at`, prost
//! bytes), which are moved into core's form as msgw starts.

use chrono::{DateTime, Utc};
use prost::Message;
use prost_types::Timestamp;

use super::batch;
use super::convert::IntoOperation;
use crate::core::domain::{Error, Facts, FieldViolation, Operation, representable};
use crate::core::schedule::{MAX_AHEAD, Timed};
use crate::transport::proto::{self, BatchItem, batch_item::Operation as Item};

/// A send request that may carry a `send_at`.
pub trait TimedRequest: IntoOperation {
    /// Its `send_at`, if set.
    fn send_at(&self) -> Option<&Timestamp>;
}

macro_rules! timed {
    ($($request:ident),* $(,)?) => {
        $(impl TimedRequest for proto::$request {
            fn send_at(&self) -> Option<&Timestamp> {
                self.send_at.as_ref()
            }
        })*
    };
}

timed!(
    SendSmsRequest,
    SendViberRequest,
    SendRcsRequest,
    SendTelegramOtpRequest,
    SendVoiceRequest,
    SendVoiceOtpRequest,
    SendPipelineRequest,
);

/// The time of a request (`field` names its `send_at` in errors); `None` when it has no
/// `send_at`.
pub fn timing<R: TimedRequest>(request: &R, field: &str) -> Result<Option<Timed>, Error> {
    let Some(at) = request.send_at() else {
        return Ok(None);
    };
    let send_at = send_at(at, R::KIND.facts(), Utc::now()).map_err(|description| {
        Error::InvalidArgument(vec![FieldViolation {
            field: field.to_owned(),
            description,
        }])
    })?;
    Ok(Some(Timed { send_at }))
}

/// The timing of every item of a Batch, in order. Every kind of item is named: a new
/// batchable send does not compile until its `send_at` is read here.
pub fn batch_timings(items: &[BatchItem]) -> Result<Vec<Option<Timed>>, Error> {
    let mut violations = Vec::new();
    let mut timings = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let timed = match &item.operation {
            Some(Item::SendSms(r)) => timing(r, &format!("items[{i}].send_sms.send_at")),
            Some(Item::SendViber(r)) => timing(r, &format!("items[{i}].send_viber.send_at")),
            Some(Item::SendRcs(r)) => timing(r, &format!("items[{i}].send_rcs.send_at")),
            Some(Item::SendTelegramOtp(r)) => {
                timing(r, &format!("items[{i}].send_telegram_otp.send_at"))
            }
            Some(Item::SendVoice(r)) => timing(r, &format!("items[{i}].send_voice.send_at")),
            Some(Item::SendVoiceOtp(r)) => timing(r, &format!("items[{i}].send_voice_otp.send_at")),
            Some(Item::SendPipeline(r)) => timing(r, &format!("items[{i}].send_pipeline.send_at")),
            // Requests without a `send_at`: answered now. (An item without an operation
            // is refused when it is parsed.)
            Some(
                Item::GetMessageStatus(_)
                | Item::GetBalance(_)
                | Item::ListSenders(_)
                | Item::LookupHlr(_)
                | Item::CreateSmsTemplate(_)
                | Item::ListSmsTemplates(_)
                | Item::DeleteSmsTemplates(_)
                | Item::CreateViberTemplate(_)
                | Item::ListViberTemplates(_)
                | Item::DeleteViberTemplates(_),
            )
            | None => Ok(None),
        };
        match timed {
            Ok(t) => timings.push(t),
            Err(Error::InvalidArgument(v)) => violations.extend(v),
            Err(e) => return Err(e),
        }
    }
    if violations.is_empty() {
        Ok(timings)
    } else {
        Err(Error::InvalidArgument(violations))
    }
}

/// A `send_at` as msgw keeps it (to the millisecond), or why it cannot be.
/// (`facts`: those of the request's operation, which say whether it can be scheduled).
fn send_at(at: &Timestamp, facts: Facts, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let nanos = u32::try_from(at.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| format!("nanos {} out of range: 0 to 999,999,999", at.nanos))?;
    let t = DateTime::from_timestamp(at.seconds, nanos)
        .filter(representable)
        .ok_or_else(|| "not a time between the years 1 and 9999".to_owned())?;
    let t = DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t);
    if t > now + MAX_AHEAD {
        return Err(format!(
            "at most 35 days ahead (until {}); got {}",
            (now + MAX_AHEAD).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        ));
    }
    if !facts.schedulable && t > now {
        return Err(format!(
            "{} cannot be scheduled: its answer is needed as it is placed (a voice OTP call's code is the answer to the call that places it); leave send_at unset",
            facts.rpc
        ));
    }
    Ok(t)
}

/// Reads a request an earlier version of msgw kept (a `BatchItem` without its
/// `send_at`, prost bytes) into its operation, validated again.
pub fn read_earlier_form(bytes: &[u8]) -> Result<Operation, Error> {
    let item = BatchItem::decode(bytes)
        .map_err(|e| Error::Internal(format!("a kept request does not decode: {e}")))?;
    let mut parsed = batch::parse(vec![item], 1)?;
    match parsed.pop() {
        Some((_, op)) if parsed.is_empty() => Ok(op),
        _ => Err(Error::Internal(
            "a kept request is not one operation".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::domain::OpKind;

    fn ts(t: DateTime<Utc>) -> Timestamp {
        Timestamp {
            seconds: t.timestamp(),
            nanos: t.timestamp_subsec_nanos() as i32,
        }
    }

    #[test]
    fn send_at_bounds() {
        let now = Utc::now();
        let ahead = now + chrono::TimeDelta::seconds(3);
        assert!(send_at(&ts(ahead), OpKind::SendSms.facts(), now).is_ok());
        assert!(
            send_at(
                &ts(now - chrono::TimeDelta::days(400)),
                OpKind::SendVoiceOtp.facts(),
                now
            )
            .is_ok()
        );
        assert!(
            send_at(
                &ts(now + MAX_AHEAD + chrono::TimeDelta::seconds(1)),
                OpKind::SendSms.facts(),
                now
            )
            .is_err()
        );
        assert!(send_at(&ts(ahead), OpKind::SendVoiceOtp.facts(), now).is_err());
        let bad_nanos = Timestamp {
            seconds: now.timestamp(),
            nanos: 1_000_000_000,
        };
        assert!(send_at(&bad_nanos, OpKind::SendSms.facts(), now).is_err());
        let negative = Timestamp {
            seconds: 1,
            nanos: -1,
        };
        assert!(send_at(&negative, OpKind::SendSms.facts(), now).is_err());
        let huge = Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert!(send_at(&huge, OpKind::SendSms.facts(), now).is_err());
    }
}
