//! Simulated delivery: a background task walks each message through its
//! status timeline and fires the webhook once it reaches a final state.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Inner;
use super::channel::Channel;
use super::magic::Magic;
use super::message::{Delivery, Target};
use super::state::MessageRecord;
use super::status::{self, ACCEPTED, DELIVERED, EXPIRED, READ, REJECTED, REPLIED, ROUTING};
use super::webhook;

/// One status transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub channel: Channel,
    pub status: &'static str,
}

/// Seconds a delivered voice call lasts.
const VOICE_CALL_SECONDS: u64 = 12;

/// Slow-delivery magic multiplies the step delay by this.
const SLOW_FACTOR: u32 = 10;

/// Starts the delivery task of `delivery`, which stops with the sandbox.
pub(super) fn spawn(inner: Arc<Inner>, delivery: Delivery) {
    inner.state().begin_delivery(delivery.clone());
    resume(inner, delivery, 0);
}

/// Runs the delivery task of `delivery` from its step `done` on (after a restart, the
/// steps it had made), stopping with the sandbox.
pub(super) fn resume(inner: Arc<Inner>, delivery: Delivery, done: usize) {
    let mut stopped = inner.stopped.subscribe();
    if *stopped.borrow() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(id = delivery.id, "sandbox delivery needs a tokio runtime");
        return;
    };
    runtime.spawn(async move {
        tokio::select! {
            _ = stopped.wait_for(|stopped| *stopped) => {}
            () = run(&inner, delivery, done) => {}
        }
    });
}

/// The transitions after ACCEPTED. A failed channel hands over to the next
/// one, which starts again at ACCEPTED; the last step is the final state.
pub fn timeline(channels: &[Channel], magic: Magic) -> Vec<Step> {
    let mut steps = Vec::new();
    for (index, &channel) in channels.iter().enumerate() {
        if index > 0 {
            steps.push(Step {
                channel,
                status: ACCEPTED,
            });
        }
        steps.push(Step {
            channel,
            status: ROUTING,
        });
        let failure = match magic {
            Magic::Undeliverable => Some(status::UNDELIVERABLE),
            Magic::Expired => Some(EXPIRED),
            Magic::Rejected => Some(REJECTED),
            Magic::Fallback if index == 0 => Some(status::UNDELIVERABLE),
            _ => None,
        };
        if let Some(status) = failure {
            steps.push(Step { channel, status });
            continue;
        }
        steps.push(Step {
            channel,
            status: DELIVERED,
        });
        if channel == Channel::Viber {
            steps.push(Step {
                channel,
                status: READ,
            });
            if magic == Magic::TwoWay {
                steps.push(Step {
                    channel,
                    status: REPLIED,
                });
            }
        }
        break;
    }
    steps
}

async fn run(inner: &Inner, delivery: Delivery, done: usize) {
    deliver(inner, &delivery, done).await;
    inner.state().end_delivery(delivery.id, delivery.msg_id);
}

async fn deliver(inner: &Inner, delivery: &Delivery, done: usize) {
    let mut delay = inner.config.step_delay;
    if delivery.magic == Magic::Slow {
        delay = delay.saturating_mul(SLOW_FACTOR);
    }
    let mut last = None;
    let steps = timeline(&delivery.channels, delivery.magic);
    // After a restart, the record already shows the last step made.
    if done > 0 && done >= steps.len() {
        let state = inner.state();
        last = state
            .message(delivery.id)
            .filter(|r| r.msg_id == delivery.msg_id)
            .cloned()
            .map(|record| (record, state.account_webhook_url.clone()));
    }
    let last_step = steps.len().saturating_sub(1);
    for (n, step) in steps.into_iter().enumerate().skip(done) {
        tokio::time::sleep(delay).await;
        let replies = replies_at(delivery.magic, step, n == last_step);
        let mut state = inner.state();
        state.step_done(delivery.id, delivery.msg_id);
        let Some(record) = state.advance(
            delivery.id,
            delivery.msg_id,
            step.channel,
            step.status,
            replies,
        ) else {
            tracing::debug!(id = delivery.id, "sandbox message replaced by a newer send");
            return;
        };
        // Read with the status so the address in force when the message became
        // final is the one used, whatever changes it afterwards.
        let account_url = state.account_webhook_url.clone();
        drop(state);
        tracing::debug!(id = delivery.id, status = step.status, "sandbox status");
        last = Some((record, account_url));
    }
    let Some((record, account_url)) = last else {
        return;
    };
    if delivery.magic == Magic::NoWebhook {
        return;
    }
    let url = match &delivery.target {
        Target::None => return,
        Target::Hook(url) => url.clone(),
        Target::Account => match account_url {
            Some(url) => url,
            None => return,
        },
    };
    let two_way = delivery.magic == Magic::TwoWay;
    let body = webhook_body(delivery.id, &record, delivery.dtmf, two_way);
    // The webhook tells the final status: it goes once that status is saved, so a
    // restart never takes back what it told.
    while inner.durable().await.is_err() {
        tokio::time::sleep(inner.config.webhook_backoff).await;
    }
    webhook::post(inner, &url, &body).await;
}

/// The webhook of message `id` at its final `record`: as the gateway posts it. A voice
/// call that collects a digit (`dtmf`) gets `reply: "1"` from a `two_way` number.
pub(super) fn webhook_body(id: u64, record: &MessageRecord, dtmf: bool, two_way: bool) -> Value {
    let mut body = json!({
        "success": status::is_success(record.status),
        "id": id.to_string(),
        "msg_id": record.msg_id.to_string(),
        "type": record.channel.name(),
        "status": record.status,
        "updated": record.updated,
    });
    if let Some(reason) = status::failure_reason(record.status) {
        body["error"] = json!(reason);
    }
    if record.channel == Channel::Voice && status::is_success(record.status) {
        body["duration"] = json!(VOICE_CALL_SECONDS);
        if dtmf && two_way {
            body["reply"] = json!("1");
        }
    }
    if let Some(replies) = &record.replies {
        body["replies"] = replies.clone();
    }
    body
}

/// The replies a message has once it reaches `step` (`last`: its final one): a two-way
/// Viber conversation's, or the opting-out number's STOP once it is delivered.
fn replies_at(magic: Magic, step: Step, last: bool) -> Option<Value> {
    match magic {
        Magic::TwoWay if step.status == REPLIED => Some(two_way_replies()),
        Magic::OptsOut if last && status::is_success(step.status) => Some(json!([
            {"datetime": status::now_rfc3339(), "message": "STOP"}
        ])),
        _ => None,
    }
}

/// The replies of a two-way Viber conversation: one text, one media.
fn two_way_replies() -> Value {
    let now = status::now_rfc3339();
    json!([
        {"datetime": now, "message": "Thanks, received"},
        {"datetime": now, "media": {
            "url": "https://example.org/vibermedia/invoice.pdf",
            "filename": "invoice.pdf",
            "filesize": 67983
        }},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(steps: &[Step]) -> Vec<(&'static str, &'static str)> {
        steps.iter().map(|s| (s.channel.name(), s.status)).collect()
    }

    #[test]
    fn viber_with_sms_fallback_switches_channel() {
        let steps = timeline(&[Channel::Viber, Channel::Sms], Magic::Fallback);
        assert_eq!(
            names(&steps),
            [
                ("viber", "ROUTING"),
                ("viber", "UNDELIVERABLE"),
                ("sms", "ACCEPTED"),
                ("sms", "ROUTING"),
                ("sms", "DELIVERED"),
            ]
        );
    }

    #[test]
    fn the_opting_out_number_replies_stop_once_delivered() {
        let steps = timeline(&[Channel::Sms], Magic::OptsOut);
        let last = steps.len() - 1;
        let replies: Vec<Option<Value>> = steps
            .iter()
            .enumerate()
            .map(|(n, step)| replies_at(Magic::OptsOut, *step, n == last))
            .collect();
        assert!(replies[..last].iter().all(Option::is_none));
        let stop = replies[last].as_ref().expect("the final step replies");
        assert_eq!(stop[0]["message"], "STOP");
        assert_eq!(steps[last].status, DELIVERED);
    }

    #[test]
    fn two_way_viber_ends_replied() {
        let steps = timeline(&[Channel::Viber], Magic::TwoWay);
        assert_eq!(steps.last().map(|s| s.status), Some(REPLIED));
    }
}
