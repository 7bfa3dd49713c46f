//! Scheduled sends at the gRPC border: a send request's `send_at` checked, and the
//! request kept as it came (a `BatchItem` without its `send_at`, prost bytes) for the
//! scheduler, which reads it back through [`decoder`] and validates it again.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use prost::Message;
use prost_types::Timestamp;

use super::batch;
use crate::core::domain::{Error, FieldViolation, Operation, representable};
use crate::core::schedule::{Decoder, MAX_AHEAD, Timed};
use crate::transport::proto::{self, BatchItem, batch_item::Operation as Item};

/// A send request that may carry a `send_at`.
pub trait TimedRequest: Sized {
    /// Whether it may be kept for later (a voice OTP call may not).
    const SCHEDULABLE: bool = true;

    /// Its `send_at`, if set.
    fn send_at(&self) -> Option<&Timestamp>;

    /// The request as a batch item, without its `send_at`.
    fn into_item(self) -> Item;
}

macro_rules! timed {
    ($($request:ident => $variant:ident),* $(,)?) => {
        $(impl TimedRequest for proto::$request {
            fn send_at(&self) -> Option<&Timestamp> {
                self.send_at.as_ref()
            }

            fn into_item(self) -> Item {
                Item::$variant(proto::$request {
                    send_at: None,
                    ..self
                })
            }
        })*
    };
}

timed!(
    SendSmsRequest => SendSms,
    SendViberRequest => SendViber,
    SendRcsRequest => SendRcs,
    SendTelegramOtpRequest => SendTelegramOtp,
    SendVoiceRequest => SendVoice,
    SendPipelineRequest => SendPipeline,
);

impl TimedRequest for proto::SendVoiceOtpRequest {
    // Its code is the answer to the call that places it, and msgw keeps it nowhere.
    const SCHEDULABLE: bool = false;

    fn send_at(&self) -> Option<&Timestamp> {
        self.send_at.as_ref()
    }

    fn into_item(self) -> Item {
        Item::SendVoiceOtp(proto::SendVoiceOtpRequest {
            send_at: None,
            ..self
        })
    }
}

/// The time and kept form of a request (`field` names its `send_at` in errors); `None`
/// when it has no `send_at`.
pub fn timing<R: TimedRequest + Clone>(request: &R, field: &str) -> Result<Option<Timed>, Error> {
    let Some(at) = request.send_at() else {
        return Ok(None);
    };
    let send_at = send_at(at, R::SCHEDULABLE, Utc::now()).map_err(|description| {
        Error::InvalidArgument(vec![FieldViolation {
            field: field.to_owned(),
            description,
        }])
    })?;
    let payload = BatchItem {
        operation: Some(request.clone().into_item()),
    }
    .encode_to_vec();
    Ok(Some(Timed { send_at, payload }))
}

/// The timing of every item of a Batch, in order.
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
            _ => Ok(None),
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
fn send_at(at: &Timestamp, schedulable: bool, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
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
    if !schedulable && t > now {
        return Err("a voice OTP call cannot be scheduled: its code is the answer to the call that places it; leave send_at unset".to_owned());
    }
    Ok(t)
}

/// Reads a kept request back into its operation, validated again.
pub fn decoder() -> Decoder {
    Arc::new(|bytes: &[u8]| -> Result<Operation, Error> {
        let item = BatchItem::decode(bytes)
            .map_err(|e| Error::Internal(format!("a kept request does not decode: {e}")))?;
        let mut parsed = batch::parse(vec![item], 1)?;
        match parsed.pop() {
            Some((_, op)) if parsed.is_empty() => Ok(op),
            _ => Err(Error::Internal(
                "a kept request is not one operation".into(),
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(send_at(&ts(ahead), true, now).is_ok());
        assert!(send_at(&ts(now - chrono::TimeDelta::days(400)), false, now).is_ok());
        assert!(
            send_at(
                &ts(now + MAX_AHEAD + chrono::TimeDelta::seconds(1)),
                true,
                now
            )
            .is_err()
        );
        assert!(send_at(&ts(ahead), false, now).is_err());
        let bad_nanos = Timestamp {
            seconds: now.timestamp(),
            nanos: 1_000_000_000,
        };
        assert!(send_at(&bad_nanos, true, now).is_err());
        let negative = Timestamp {
            seconds: 1,
            nanos: -1,
        };
        assert!(send_at(&negative, true, now).is_err());
        let huge = Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert!(send_at(&huge, true, now).is_err());
    }
}
