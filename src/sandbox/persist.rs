//! The sandbox's account kept in msgw's store, so that restarting msgw on its sandbox
//! changes nothing a user can see, even after a crash (`kill -9`): the balance, every
//! message with its status, the templates, the id counters, and the deliveries under
//! way (resumed where they stood).
//!
//! An answer of the sandbox (a send's `msg_id`, a balance, a template, a status, a
//! webhook) goes out only once the state it shows is saved. Saves are group commits
//! ([`GroupWriter`]): each one writes what changed since the one before (see
//! `saved.rs`), and the answers that queued while it was written share the next one.
//! Deliveries moving on their own are saved with the next answer's save, and at the
//! latest `SAVE_EVERY` after they moved.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::delivery;
use super::message::Delivery;
use super::state::State;
use super::{Inner, lock, saved};
use crate::core::group_commit::GroupWriter;
use crate::core::ports::store::{SandboxSave, Store, StoreError};

/// How often changes no answer waits for (deliveries moving) are saved.
const SAVE_EVERY: Duration = Duration::from_millis(250);

/// Answers one save releases at most; more wait for the next.
const MAX_GROUP: usize = 4096;

/// The sandbox account's name in the store (one sandbox per store).
const ACCOUNT: &str = "sandbox";

/// Where the sandbox keeps its state, and the writer of its saves.
pub(super) struct Persistence {
    saver: Arc<Saver>,
    writer: GroupWriter<(), ()>,
}

/// Writes the state's changes to the store, one save at a time (the group writer's
/// task is its only caller).
struct Saver {
    store: Arc<dyn Store>,
    state: Arc<Mutex<State>>,
    /// The version of the state the last save covered.
    saved: AtomicU64,
}

impl Persistence {
    /// Loads the saved account into `state`, if there is one; returns the state to share,
    /// its persistence and the deliveries to resume.
    pub(super) async fn load(
        store: Arc<dyn Store>,
        mut state: State,
    ) -> Result<(Arc<Mutex<State>>, Self, Vec<(Delivery, usize)>), StoreError> {
        let document = store.sandbox_state(ACCOUNT).await?;
        let records = store.sandbox_messages(ACCOUNT).await?;
        saved::restore(&mut state, document.as_deref(), records)?;
        state.changes.tracked = true;
        let underway = state.deliveries.values().cloned().collect();
        let state = Arc::new(Mutex::new(state));
        let saver = Arc::new(Saver {
            store,
            state: state.clone(),
            saved: AtomicU64::new(0),
        });
        let writer = GroupWriter::spawn(MAX_GROUP, {
            let saver = saver.clone();
            move |group: Vec<()>| {
                let saver = saver.clone();
                async move {
                    saver.save().await?;
                    Ok(vec![(); group.len()])
                }
            }
        });
        let persistence = Self { saver, writer };
        // A document of the earlier shape is moved into records before anything is answered.
        persistence.durable().await?;
        Ok((state, persistence, underway))
    }

    /// Waits until the state as it is now is saved (at once if it is).
    pub(super) async fn durable(&self) -> Result<(), StoreError> {
        let version = lock(&self.saver.state).changes.version;
        if self.saver.saved.load(Ordering::Acquire) >= version {
            return Ok(());
        }
        self.writer.submit(()).await
    }
}

impl Saver {
    /// Saves every change not saved yet; a failed save leaves them for the next one.
    async fn save(&self) -> Result<(), StoreError> {
        let (version, ids, account, messages) = {
            let mut state = lock(&self.state);
            let version = state.changes.version;
            if self.saved.load(Ordering::Acquire) >= version {
                return Ok(());
            }
            let ids: Vec<u64> = state.changes.messages.drain().collect();
            let account =
                std::mem::take(&mut state.changes.account).then(|| saved::account(&state));
            let messages: Vec<_> = ids
                .iter()
                .filter_map(|&id| Some((id, saved::message(&state, id)?)))
                .collect();
            (version, ids, account, messages)
        };
        let had_account = account.is_some();
        let written = match encode(account, messages) {
            Ok(save) => self.store.save_sandbox(ACCOUNT, &save).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                self.saved.fetch_max(version, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                let mut state = lock(&self.state);
                state.changes.messages.extend(ids);
                state.changes.account |= had_account;
                Err(e)
            }
        }
    }
}

fn encode(
    account: Option<saved::Account>,
    messages: Vec<(u64, saved::SavedMessage)>,
) -> Result<SandboxSave, StoreError> {
    let json = |e: serde_json::Error| StoreError::Corrupt(format!("sandbox state: {e}"));
    Ok(SandboxSave {
        account: account
            .map(|a| serde_json::to_string(&a))
            .transpose()
            .map_err(json)?,
        messages: messages
            .into_iter()
            .map(|(id, m)| Ok((id, serde_json::to_string(&m).map_err(json)?)))
            .collect::<Result<_, StoreError>>()?,
    })
}

/// Saves the changes no answer waits for while the sandbox runs; then, once it stops,
/// whatever is left.
pub(super) async fn keep(inner: Arc<Inner>) {
    let Some(persistence) = &inner.persistence else {
        return;
    };
    let mut stopped = inner.stopped.subscribe();
    let mut tick = tokio::time::interval(SAVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // A failure is logged by the writer and retried at the next tick.
            _ = tick.tick() => { let _ = persistence.durable().await; }
            () = async {
                // The guard it returns must not live across the other arm's save.
                let _ = stopped.wait_for(|s| *s).await;
            } => break,
        }
    }
    if let Err(e) = persistence.durable().await {
        tracing::error!(error = %e, "sandbox: its last changes could not be saved");
    }
}

/// Resumes the deliveries a restart interrupted.
pub(super) fn resume(inner: &Arc<Inner>, underway: Vec<(Delivery, usize)>) {
    for (delivery, done) in underway {
        delivery::resume(inner.clone(), delivery, done);
    }
}
