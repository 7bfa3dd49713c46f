//! In-memory account state: balance, message records and templates.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast;

use serde_json::{Value, json};

use super::billing::Units;
use super::channel::Channel;
use super::error::OpError;
use super::message::Delivery;
use super::message::{Letter, Moment};
use super::status;

/// First gateway message id handed out; large, like real gateway ids.
const FIRST_MSG_ID: u64 = 100_000_001;

/// First template id handed out.
const FIRST_TEMPLATE_ID: u64 = 1_001;

/// What the `status` operation reports for one client message id.
#[derive(Debug, Clone)]
pub struct MessageRecord {
    pub msg_id: u64,
    pub channel: Channel,
    pub status: &'static str,
    pub updated: String,
    /// Two-way Viber replies, once the message reached REPLIED.
    pub replies: Option<Value>,
    /// What the message says, for the inbox (`None`: received before it was kept).
    pub letter: Option<Arc<Letter>>,
    /// The statuses it went through, oldest first.
    pub timeline: Vec<Moment>,
    /// Whether it was ended by hand (its delivery then stops).
    pub by_hand: bool,
}

/// A stored SMS template.
#[derive(Debug, Clone)]
pub struct SmsTemplate {
    pub id: u64,
    pub name: String,
    pub template: String,
    pub chars: usize,
    pub parts: u32,
    pub created: String,
}

/// A stored Viber template; its moderation status derives from its age.
#[derive(Debug, Clone)]
pub struct ViberTemplate {
    pub id: u64,
    pub template: String,
    pub signature: String,
    pub created: Instant,
}

/// Mutable state of one sandbox account.
#[derive(Debug)]
pub struct State {
    pub(super) balance: Units,
    pub(super) messages: HashMap<u64, MessageRecord>,
    pub(super) sms_templates: Vec<SmsTemplate>,
    pub(super) viber_templates: Vec<ViberTemplate>,
    pub(super) next_msg_id: u64,
    pub(super) next_template_id: u64,
    pub account_webhook_url: Option<String>,
    /// Deliveries under way by client id, with the steps each has made: what a
    /// restart resumes.
    pub(super) deliveries: HashMap<u64, (Delivery, usize)>,
    /// What changed since the last save.
    pub(super) changes: Changes,
}

/// The changes a save has not covered yet. Every change goes through a method of
/// [`State`], which counts it here, so an answer can wait for the save of what it shows.
#[derive(Debug)]
pub struct Changes {
    /// Counts every change; a save covers the version it saw.
    pub version: u64,
    /// Client ids whose message or delivery changed (kept only for a saved account).
    pub messages: HashSet<u64>,
    /// The balance, an id counter or a template changed.
    pub account: bool,
    /// Whether the account is saved: an account kept in memory only never drains
    /// `messages`, so it does not fill it.
    pub tracked: bool,
    /// Tells the inbox pages which message changed.
    inbox: broadcast::Sender<u64>,
}

/// Changed messages an inbox page may fall behind by before it reloads.
const INBOX_BACKLOG: usize = 1024;

impl Default for Changes {
    fn default() -> Self {
        Self {
            version: 0,
            messages: HashSet::new(),
            account: false,
            tracked: false,
            inbox: broadcast::channel(INBOX_BACKLOG).0,
        }
    }
}

impl Changes {
    /// The ids of messages that change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<u64> {
        self.inbox.subscribe()
    }
}

impl State {
    /// Fresh state with `balance` units and no messages or templates.
    pub fn new(balance: Units, account_webhook_url: Option<String>) -> Self {
        Self {
            balance,
            messages: HashMap::new(),
            sms_templates: Vec::new(),
            viber_templates: Vec::new(),
            next_msg_id: FIRST_MSG_ID,
            next_template_id: FIRST_TEMPLATE_ID,
            account_webhook_url,
            deliveries: HashMap::new(),
            changes: Changes::default(),
        }
    }

    /// Counts a change of the balance, the id counters or the templates.
    fn account_changed(&mut self) {
        self.changes.version += 1;
        self.changes.account = true;
    }

    /// Counts a change of the message or delivery of client id `id`.
    fn message_changed(&mut self, id: u64) {
        self.changes.version += 1;
        // Nobody listening is no error.
        let _ = self.changes.inbox.send(id);
        if self.changes.tracked {
            self.changes.messages.insert(id);
        }
    }

    /// Records a delivery that starts now.
    pub fn begin_delivery(&mut self, delivery: Delivery) {
        self.message_changed(delivery.id);
        self.deliveries.insert(delivery.id, (delivery, 0));
    }

    /// Counts a step of the delivery of message `msg_id`.
    pub fn step_done(&mut self, id: u64, msg_id: u64) {
        if let Some((delivery, done)) = self.deliveries.get_mut(&id)
            && delivery.msg_id == msg_id
        {
            *done += 1;
            self.message_changed(id);
        }
    }

    /// Forgets the delivery of message `msg_id` (over, or replaced by a newer send).
    pub fn end_delivery(&mut self, id: u64, msg_id: u64) {
        if self
            .deliveries
            .get(&id)
            .is_some_and(|(delivery, _)| delivery.msg_id == msg_id)
        {
            self.deliveries.remove(&id);
            self.message_changed(id);
        }
    }

    /// Current balance in units.
    pub fn balance(&self) -> Units {
        self.balance
    }

    /// Takes `price` off the balance, or refuses when it would go negative.
    pub fn charge(&mut self, price: Units) -> Result<(), OpError> {
        if price > self.balance {
            return Err(OpError::InsufficientBalance);
        }
        if price != 0 {
            self.balance -= price;
            self.account_changed();
        }
        Ok(())
    }

    /// Creates (or replaces, for a reused client id) the record of a new send.
    pub fn start_message(&mut self, id: u64, channel: Channel, letter: Option<Letter>) -> u64 {
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        self.account_changed();
        let updated = status::now_rfc3339();
        self.messages.insert(
            id,
            MessageRecord {
                msg_id,
                channel,
                status: status::ACCEPTED,
                timeline: vec![Moment {
                    time: updated.clone(),
                    channel,
                    status: status::ACCEPTED.to_owned(),
                }],
                updated,
                replies: None,
                letter: letter.map(Arc::new),
                by_hand: false,
            },
        );
        self.message_changed(id);
        msg_id
    }

    /// Ends the message of `id` by hand with `status` (and `replies`), stopping its
    /// delivery; returns the updated record.
    pub fn end_by_hand(
        &mut self,
        id: u64,
        status: &'static str,
        replies: Option<Value>,
    ) -> Option<MessageRecord> {
        let msg_id = self.messages.get(&id)?.msg_id;
        self.end_delivery(id, msg_id);
        self.messages.get_mut(&id)?.by_hand = true;
        self.set_status(id, None, status, replies)
    }

    /// Moves the record of `id` to a new status, unless it was replaced by a
    /// later send with the same client id; returns the updated record.
    pub fn advance(
        &mut self,
        id: u64,
        msg_id: u64,
        channel: Channel,
        status: &'static str,
        replies: Option<Value>,
    ) -> Option<MessageRecord> {
        // Replaced by a later send, or ended by hand.
        if self
            .messages
            .get(&id)
            .is_none_or(|r| r.msg_id != msg_id || r.by_hand)
        {
            return None;
        }
        self.set_status(id, Some(channel), status, replies)
    }

    /// Records `status` (and `replies`, when given) on the record of `id`, reached on
    /// `channel` (`None`: the record's own), in its timeline, and tells whoever
    /// follows the sandbox's messages; returns the updated record.
    fn set_status(
        &mut self,
        id: u64,
        channel: Option<Channel>,
        status: &'static str,
        replies: Option<Value>,
    ) -> Option<MessageRecord> {
        let record = self.messages.get_mut(&id)?;
        if let Some(channel) = channel {
            record.channel = channel;
        }
        record.status = status;
        record.updated = status::now_rfc3339();
        record.timeline.push(Moment {
            time: record.updated.clone(),
            channel: record.channel,
            status: status.to_owned(),
        });
        if replies.is_some() {
            record.replies = replies;
        }
        let record = record.clone();
        self.message_changed(id);
        Some(record)
    }

    /// The record of client id `id`.
    pub fn message(&self, id: u64) -> Option<&MessageRecord> {
        self.messages.get(&id)
    }

    /// A fresh template id (SMS and Viber templates share the sequence).
    pub fn next_template_id(&mut self) -> u64 {
        let id = self.next_template_id;
        self.next_template_id += 1;
        self.account_changed();
        id
    }

    /// Adds an SMS template.
    pub fn add_sms_template(&mut self, template: SmsTemplate) {
        self.sms_templates.push(template);
        self.account_changed();
    }

    /// Adds a Viber template.
    pub fn add_viber_template(&mut self, template: ViberTemplate) {
        self.viber_templates.push(template);
        self.account_changed();
    }

    /// Deletes the SMS templates `doomed` selects; returns how many.
    pub fn delete_sms_templates(&mut self, doomed: impl Fn(&SmsTemplate) -> bool) -> usize {
        let before = self.sms_templates.len();
        self.sms_templates.retain(|t| !doomed(t));
        let deleted = before - self.sms_templates.len();
        if deleted > 0 {
            self.account_changed();
        }
        deleted
    }

    /// Deletes the Viber templates `doomed` selects; returns how many.
    pub fn delete_viber_templates(&mut self, doomed: impl Fn(&ViberTemplate) -> bool) -> usize {
        let before = self.viber_templates.len();
        self.viber_templates.retain(|t| !doomed(t));
        let deleted = before - self.viber_templates.len();
        if deleted > 0 {
            self.account_changed();
        }
        deleted
    }
}

impl MessageRecord {
    /// Payload of the `status` operation for client id `id`.
    pub fn to_json(&self, id: u64) -> Value {
        let mut out = json!({
            "id": id,
            "msg_id": self.msg_id,
            "type": self.channel.name(),
            "status": self.status,
            "updated": self.updated,
        });
        if let Some(replies) = &self.replies {
            out["replies"] = replies.clone();
        }
        out
    }
}
