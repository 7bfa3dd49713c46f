//! The sandbox's account as msgw's store keeps it: one document for the balance, the
//! id counters and the templates, and one record per client id for its message and
//! the delivery under way. A save writes the document when it changed and the records
//! that changed, so its cost follows what changed, not the account's size.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel::Channel;
use super::message::Delivery;
use super::message::{Letter, Moment};
use super::state::{MessageRecord, SmsTemplate, State, ViberTemplate};
use super::status;
use crate::core::ports::store::StoreError;

/// The account's document.
#[derive(Serialize, Deserialize)]
pub(super) struct Account {
    balance: i64,
    next_msg_id: u64,
    next_template_id: u64,
    sms_templates: Vec<SavedSmsTemplate>,
    viber_templates: Vec<SavedViberTemplate>,
    /// Where a document saved before messages had records of their own held them;
    /// read once, then moved into records.
    #[serde(default, skip_serializing)]
    messages: Vec<WholeMessage>,
    #[serde(default, skip_serializing)]
    deliveries: Vec<(Delivery, usize)>,
}

/// The record of one client id.
#[derive(Serialize, Deserialize)]
pub(super) struct SavedMessage {
    msg_id: u64,
    channel: Channel,
    status: String,
    updated: String,
    replies: Option<Value>,
    /// The delivery under way, with the steps it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delivery: Option<(Delivery, usize)>,
    /// What it says, for the inbox (records saved before the inbox have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    letter: Option<Letter>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    timeline: Vec<Moment>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    by_hand: bool,
}

/// A message in a document of the earlier shape.
#[derive(Deserialize)]
struct WholeMessage {
    id: u64,
    msg_id: u64,
    channel: Channel,
    status: String,
    updated: String,
    replies: Option<Value>,
}

#[derive(Serialize, Deserialize)]
struct SavedSmsTemplate {
    id: u64,
    name: String,
    template: String,
    chars: usize,
    parts: u32,
    created: String,
}

#[derive(Serialize, Deserialize)]
struct SavedViberTemplate {
    id: u64,
    template: String,
    signature: String,
    /// When it was created, in milliseconds since the Unix epoch: its moderation
    /// status follows its age, which a restart must not reset.
    #[serde(default)]
    created_ms: Option<u64>,
    /// Its age when saved, in documents of the earlier shape.
    #[serde(default, skip_serializing)]
    age_ms: Option<u64>,
}

/// The account's document as `state` holds it.
pub(super) fn account(state: &State) -> Account {
    let now = unix_ms();
    Account {
        balance: state.balance,
        next_msg_id: state.next_msg_id,
        next_template_id: state.next_template_id,
        sms_templates: state
            .sms_templates
            .iter()
            .map(|t| SavedSmsTemplate {
                id: t.id,
                name: t.name.clone(),
                template: t.template.clone(),
                chars: t.chars,
                parts: t.parts,
                created: t.created.clone(),
            })
            .collect(),
        viber_templates: state
            .viber_templates
            .iter()
            .map(|t| SavedViberTemplate {
                id: t.id,
                template: t.template.clone(),
                signature: t.signature.clone(),
                created_ms: Some(now.saturating_sub(millis(t.created.elapsed()))),
                age_ms: None,
            })
            .collect(),
        messages: Vec::new(),
        deliveries: Vec::new(),
    }
}

/// The record of client id `id` as `state` holds it (none for an id never sent).
pub(super) fn message(state: &State, id: u64) -> Option<SavedMessage> {
    let m = state.messages.get(&id)?;
    Some(SavedMessage {
        msg_id: m.msg_id,
        channel: m.channel,
        status: m.status.to_owned(),
        updated: m.updated.clone(),
        replies: m.replies.clone(),
        delivery: state.deliveries.get(&id).cloned(),
        letter: m.letter.as_deref().cloned(),
        timeline: m.timeline.clone(),
        by_hand: m.by_hand,
    })
}

/// Puts the saved document (JSON, if there is one) and records into `state`. What
/// a document of the earlier shape held is marked changed, so the next save moves it
/// into records.
pub(super) fn restore(
    state: &mut State,
    document: Option<&str>,
    records: Vec<(u64, String)>,
) -> Result<(), StoreError> {
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt(format!("sandbox {what}: {e}"));
    if let Some(document) = document {
        let account: Account = serde_json::from_str(document).map_err(|e| corrupt("state", &e))?;
        restore_account(state, account)?;
    }
    for (id, record) in records {
        let saved: SavedMessage =
            serde_json::from_str(&record).map_err(|e| corrupt("message", &e))?;
        if let Some(delivery) = saved.delivery {
            state.deliveries.insert(id, delivery);
        }
        let mut record = record_of(
            saved.msg_id,
            saved.channel,
            &saved.status,
            saved.updated,
            saved.replies,
        )?;
        record.letter = saved.letter.map(std::sync::Arc::new);
        record.timeline = saved.timeline;
        record.by_hand = saved.by_hand;
        state.messages.insert(id, record);
    }
    Ok(())
}

fn restore_account(state: &mut State, account: Account) -> Result<(), StoreError> {
    state.balance = account.balance;
    state.next_msg_id = account.next_msg_id;
    state.next_template_id = account.next_template_id;
    state.sms_templates = account
        .sms_templates
        .into_iter()
        .map(|t| SmsTemplate {
            id: t.id,
            name: t.name,
            template: t.template,
            chars: t.chars,
            parts: t.parts,
            created: t.created,
        })
        .collect();
    let (now, wall) = (Instant::now(), unix_ms());
    state.viber_templates = account
        .viber_templates
        .into_iter()
        .map(|t| {
            let age = match (t.created_ms, t.age_ms) {
                (Some(created), _) => wall.saturating_sub(created),
                (None, age) => age.unwrap_or(0),
            };
            ViberTemplate {
                id: t.id,
                template: t.template,
                signature: t.signature,
                created: now.checked_sub(Duration::from_millis(age)).unwrap_or(now),
            }
        })
        .collect();
    let earlier_shape = !account.messages.is_empty() || !account.deliveries.is_empty();
    for m in account.messages {
        let record = record_of(m.msg_id, m.channel, &m.status, m.updated, m.replies)?;
        state.messages.insert(m.id, record);
        state.changes.messages.insert(m.id);
    }
    for (delivery, done) in account.deliveries {
        state.changes.messages.insert(delivery.id);
        state.deliveries.insert(delivery.id, (delivery, done));
    }
    if earlier_shape {
        state.changes.account = true;
        state.changes.version += 1;
    }
    Ok(())
}

fn record_of(
    msg_id: u64,
    channel: Channel,
    status: &str,
    updated: String,
    replies: Option<Value>,
) -> Result<MessageRecord, StoreError> {
    let status = status::known(status)
        .ok_or_else(|| StoreError::Corrupt(format!("sandbox state: status {status:?}")))?;
    Ok(MessageRecord {
        msg_id,
        channel,
        status,
        updated,
        replies,
        letter: None,
        timeline: Vec::new(),
        by_hand: false,
    })
}

/// Now, in milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
