//! The sandbox's account kept in msgw's store, so that restarting msgw on its sandbox
//! changes nothing a user can see: the balance, every message with its status, the
//! templates, the id counters, and the deliveries under way (resumed where they
//! stood). The state is saved as one JSON document whenever it changed, at most every
//! `SAVE_EVERY`, and once more when the sandbox stops: a crash loses at most that
//! much; a clean stop loses nothing.

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel::Channel;
use super::delivery::{self, Delivery};
use super::state::{MessageRecord, SmsTemplate, State, ViberTemplate};
use super::{Inner, status};
use crate::store::{Store, StoreError};

/// How often a changed state is saved.
const SAVE_EVERY: Duration = Duration::from_millis(250);

/// The sandbox account's name in the store (one sandbox per store).
const ACCOUNT: &str = "sandbox";

/// Where the sandbox keeps its state.
pub(super) struct Persistence {
    store: Arc<dyn Store>,
    /// The document last saved (nothing is written while it stays the same).
    saved: tokio::sync::Mutex<String>,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    balance: i64,
    next_msg_id: u64,
    next_template_id: u64,
    messages: Vec<SavedMessage>,
    sms_templates: Vec<SavedSmsTemplate>,
    viber_templates: Vec<SavedViberTemplate>,
    deliveries: Vec<(Delivery, usize)>,
}

#[derive(Serialize, Deserialize)]
struct SavedMessage {
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
    /// How old it was when saved (its moderation status follows its age).
    age_ms: u64,
}

impl Persistence {
    /// Loads the saved state into `state`, if there is one; returns the deliveries to
    /// resume.
    pub(super) async fn load(
        store: Arc<dyn Store>,
        state: &mut State,
    ) -> Result<(Self, Vec<(Delivery, usize)>), StoreError> {
        let saved = store.sandbox_state(ACCOUNT).await?.unwrap_or_default();
        let mut underway = Vec::new();
        if !saved.is_empty() {
            let snapshot: Snapshot = serde_json::from_str(&saved)
                .map_err(|e| StoreError::Corrupt(format!("sandbox state: {e}")))?;
            underway = restore(state, snapshot)?;
        }
        let persistence = Self {
            store,
            saved: tokio::sync::Mutex::new(saved),
        };
        Ok((persistence, underway))
    }

    /// Saves the state if it changed since the last save.
    pub(super) async fn save(&self, inner: &Inner) {
        let mut saved = self.saved.lock().await;
        let now = match serde_json::to_string(&snapshot(&inner.state())) {
            Ok(now) => now,
            Err(e) => {
                tracing::error!(error = %e, "sandbox: cannot encode its state");
                return;
            }
        };
        if *saved == now {
            return;
        }
        match self.store.save_sandbox_state(ACCOUNT, &now).await {
            Ok(()) => *saved = now,
            Err(e) => tracing::warn!(error = %e, "sandbox: cannot save its state; retrying"),
        }
    }
}

/// Saves the sandbox's state while it changes, until it stops; then once more.
pub(super) async fn keep(inner: Arc<Inner>) {
    let Some(persistence) = &inner.persistence else {
        return;
    };
    let mut stopped = inner.stopped.subscribe();
    let mut tick = tokio::time::interval(SAVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => persistence.save(&inner).await,
            () = async {
                // The guard it returns must not live across the other arm's save.
                let _ = stopped.wait_for(|s| *s).await;
            } => break,
        }
    }
    persistence.save(&inner).await;
}

/// Resumes the deliveries a restart interrupted.
pub(super) fn resume(inner: &Arc<Inner>, underway: Vec<(Delivery, usize)>) {
    for (delivery, done) in underway {
        delivery::resume(inner.clone(), delivery, done);
    }
}

fn snapshot(state: &State) -> Snapshot {
    let mut messages: Vec<SavedMessage> = state
        .messages
        .iter()
        .map(|(id, m)| SavedMessage {
            id: *id,
            msg_id: m.msg_id,
            channel: m.channel,
            status: m.status.to_owned(),
            updated: m.updated.clone(),
            replies: m.replies.clone(),
        })
        .collect();
    // A fixed order, so an unchanged state encodes to the same document.
    messages.sort_by_key(|m| m.id);
    let mut deliveries: Vec<(Delivery, usize)> = state.deliveries.values().cloned().collect();
    deliveries.sort_by_key(|(d, _)| d.id);
    Snapshot {
        balance: state.balance,
        next_msg_id: state.next_msg_id,
        next_template_id: state.next_template_id,
        messages,
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
                // Whole seconds: the document changes only when the age matters.
                age_ms: t.created.elapsed().as_secs() * 1000,
            })
            .collect(),
        deliveries,
    }
}

fn restore(state: &mut State, snapshot: Snapshot) -> Result<Vec<(Delivery, usize)>, StoreError> {
    state.balance = snapshot.balance;
    state.next_msg_id = snapshot.next_msg_id;
    state.next_template_id = snapshot.next_template_id;
    for m in snapshot.messages {
        let status = status::known(&m.status)
            .ok_or_else(|| StoreError::Corrupt(format!("sandbox state: status {:?}", m.status)))?;
        state.messages.insert(
            m.id,
            MessageRecord {
                msg_id: m.msg_id,
                channel: m.channel,
                status,
                updated: m.updated,
                replies: m.replies,
            },
        );
    }
    state.sms_templates = snapshot
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
    let now = std::time::Instant::now();
    state.viber_templates = snapshot
        .viber_templates
        .into_iter()
        .map(|t| ViberTemplate {
            id: t.id,
            template: t.template,
            signature: t.signature,
            created: now
                .checked_sub(Duration::from_millis(t.age_ms))
                .unwrap_or(now),
        })
        .collect();
    state.deliveries = snapshot
        .deliveries
        .iter()
        .map(|(d, done)| (d.id, (d.clone(), *done)))
        .collect();
    Ok(snapshot.deliveries)
}
