//! Delivery webhooks taken in: a body read by the gateway adapter's reader, the client
//! id found in msgw's records when the body names only the gateway's message id, and
//! the report appended to the event log. The webhook listener (`transport/webhook`)
//! checks the tokens and answers HTTP; what a body says and where it goes is decided
//! here.

use std::sync::Arc;

use super::EventLog;
use crate::core::domain::{ClientId, DeliveryReport, EventSource, NewEvent};
use crate::core::ports::gateway::ReadReport;
use crate::core::ports::store::Store;

/// Takes delivery webhooks into the event log.
#[derive(Clone)]
pub struct Intake {
    events: Arc<EventLog>,
    /// Sent messages, to find a client id by gateway id.
    store: Arc<dyn Store>,
    read: ReadReport,
}

/// Why a webhook was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The body is not the gateway's status report (why).
    Unreadable(String),
    /// The store failed; the gateway sends the webhook again.
    StoreUnavailable,
}

/// A webhook taken: stored as a new event, or a duplicate of a stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// A new event.
    Stored,
    /// The same event was stored already.
    Duplicate,
}

impl Intake {
    /// Appends to `events` what `read` reads, finding client ids in `store`.
    pub fn new(events: Arc<EventLog>, store: Arc<dyn Store>, read: ReadReport) -> Self {
        Self {
            events,
            store,
            read,
        }
    }

    /// The report a webhook body carries.
    pub fn read(&self, body: &[u8]) -> Result<DeliveryReport, Refused> {
        (self.read)(body).map_err(|e| Refused::Unreadable(e.to_string()))
    }

    /// Fills in the client id from msgw's records when the report carries only
    /// `msg_id`.
    pub async fn resolve_client_id(&self, report: &mut DeliveryReport) -> Result<(), Refused> {
        if report.client_id.is_some() {
            return Ok(());
        }
        let Some(msg_id) = report.msg_id.as_deref() else {
            return Ok(());
        };
        match self.store.client_id_of(msg_id).await {
            Ok(id) => {
                report.client_id = id;
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "webhook: store lookup failed");
                Err(Refused::StoreUnavailable)
            }
        }
    }

    /// Appends the report as a webhook's event.
    pub async fn record(&self, report: DeliveryReport) -> Result<Taken, Refused> {
        let client_id = report.client_id.map(ClientId::get);
        let event = NewEvent {
            report,
            received_at: crate::core::domain::received_now(),
            source: EventSource::Webhook,
        };
        match self.events.append(event).await {
            Ok(Some(stored)) => {
                tracing::debug!(client_id, cursor = stored.cursor.get(), "webhook stored");
                Ok(Taken::Stored)
            }
            Ok(None) => {
                tracing::debug!(client_id, "webhook duplicate");
                Ok(Taken::Duplicate)
            }
            Err(e) => {
                // Not acknowledged, so the gateway sends it again.
                tracing::error!(client_id, error = %e, "webhook: store append failed");
                Err(Refused::StoreUnavailable)
            }
        }
    }
}
