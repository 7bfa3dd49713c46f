//! EventService: the resumable stream of delivery statuses (and, for callers that ask
//! and may, the suppression list's changes).

use std::{pin::Pin, sync::Arc};

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert::{channel, reply, status, timestamp};
use super::handler;
use crate::core::domain::{self, EventSource, LogEvent, Permission, StatusEvent, Violations};
use crate::core::events::{EventLog, Filter, Start};
use crate::transport::auth::{Asks, EventScope};
use crate::transport::proto::{self, event_service_server::EventService};

/// The EventService handlers.
#[derive(Clone)]
pub struct Events {
    log: Arc<EventLog>,
}

impl Events {
    /// Handlers over the event log.
    pub fn new(log: Arc<EventLog>) -> Self {
        Self { log }
    }
}

type EventStream =
    Pin<Box<dyn Stream<Item = Result<proto::StreamStatusEventsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl EventService for Events {
    type StreamStatusEventsStream = EventStream;

    async fn stream_status_events(
        &self,
        request: Request<proto::StreamStatusEventsRequest>,
    ) -> Result<Response<Self::StreamStatusEventsStream>, Status> {
        // Timed and counted when the stream opens (or is refused); its length is the
        // client's choice.
        let log = &self.log;
        handler::pipeline(
            log.metrics(),
            request,
            |_| Asks::Rpc {
                permission: Permission::Events,
                sends: 0,
            },
            parse,
            |(start, filter), call| async move {
                let caller = call.caller;
                if filter.suppressions && !caller.may(Permission::Suppressions) {
                    return Err(domain::Error::PermissionDenied(format!(
                        "include_suppressions needs the \"suppressions\" permission besides \"events\", which caller {} does not have",
                        caller.label()
                    )));
                }
                // A caller seeing only its own messages' events sees them on every
                // start position, `from_oldest` included.
                let own = caller.events == EventScope::Own;
                let sender = if own { caller.name.clone() } else { None };
                let events = log
                    .subscribe(start, Filter { sender, ..filter }, call.account)
                    .await?;
                tracing::info!(own_events_only = own, "event stream opened");
                Ok((stream(events), handler::Provenance::default()))
            },
        )
        .await
    }
}

/// The event log's events as the stream's responses.
fn stream(
    events: impl Stream<Item = Result<LogEvent, domain::Error>> + Send + 'static,
) -> EventStream {
    Box::pin(events.map(|item| match item {
        Ok(LogEvent::Status(e)) => Ok(proto::StreamStatusEventsResponse {
            event: Some(event(e)),
            suppression: None,
        }),
        Ok(LogEvent::Suppression(e)) => Ok(proto::StreamStatusEventsResponse {
            event: None,
            suppression: Some(super::suppression::event(e)),
        }),
        Err(e) => Err(Status::from(e)),
    }))
}

fn parse(r: proto::StreamStatusEventsRequest) -> Result<(Start, Filter), domain::Error> {
    let mut violations = Violations::new();
    let mut s = violations.scope("");
    let start = match (r.after_cursor, r.from_oldest) {
        (Some(cursor), _) => Start::After(domain::Cursor::new(cursor)),
        (None, true) => Start::Oldest,
        (None, false) => Start::Live,
    };
    let mut channels = std::collections::HashSet::new();
    for (i, raw) in r.channels.iter().enumerate() {
        match domain_channel(*raw) {
            Some(c) => {
                channels.insert(c);
            }
            None => s.add(
                &format!("channels[{i}]"),
                "must be a channel (CHANNEL_SMS, CHANNEL_VIBER, ...)",
            ),
        }
    }
    let mut ids = std::collections::HashSet::new();
    for (i, raw) in r.ids.iter().enumerate() {
        if let Some(id) = s.check(&format!("ids[{i}]"), domain::ClientId::new(*raw)) {
            ids.insert(id);
        }
    }
    let filter = Filter {
        ids,
        msg_ids: r.msg_ids.into_iter().collect(),
        channels,
        final_only: r.final_only,
        sender: None,
        suppressions: r.include_suppressions,
    };
    violations.finish(Some((start, filter)))
}

fn domain_channel(raw: i32) -> Option<domain::Channel> {
    use domain::Channel as D;
    match proto::Channel::try_from(raw).ok()? {
        proto::Channel::Unspecified => None,
        proto::Channel::Sms => Some(D::Sms),
        proto::Channel::Viber => Some(D::Viber),
        proto::Channel::Rcs => Some(D::Rcs),
        proto::Channel::Telegram => Some(D::Telegram),
        proto::Channel::Voice => Some(D::Voice),
        proto::Channel::Whatsapp => Some(D::Whatsapp),
    }
}

/// A stored event as proto.
pub fn event(e: StatusEvent) -> proto::StatusEvent {
    let is_final = e.event.is_final();
    let r = e.event.report;
    let (known, raw_status) = match r.status {
        Some(s) => (s.known, s.raw),
        None => (None, String::new()),
    };
    proto::StatusEvent {
        cursor: e.cursor.get(),
        // 0: a report of a message msgw cannot name.
        id: r.client_id.map_or(0, domain::ClientId::get),
        msg_id: r.msg_id.unwrap_or_default(),
        channel: channel(
            r.channel_raw
                .as_deref()
                .and_then(domain::Channel::from_name),
        )
        .into(),
        raw_channel: r.channel_raw.unwrap_or_default(),
        status: status(known).into(),
        raw_status,
        success: r.success,
        error: r.error.unwrap_or_default(),
        updated: r.updated.map(timestamp),
        reply: r.reply.unwrap_or_default(),
        // Stored before msgw bounded durations at intake: what a client cannot hold is left out.
        duration: r
            .duration_secs
            .filter(|s| (0.0..=domain::MAX_DURATION_SECS).contains(s))
            .map(|s| prost_types::Duration {
                seconds: s.trunc() as i64,
                nanos: (s.fract() * 1e9) as i32,
            }),
        request_id: r.request_id.unwrap_or_default(),
        replies: r.replies.into_iter().map(reply).collect(),
        receive_time: Some(timestamp(e.event.received_at)),
        source: match e.event.source {
            EventSource::Webhook => proto::EventSource::Webhook,
            EventSource::Poll => proto::EventSource::Poll,
            EventSource::Msgw => proto::EventSource::Msgw,
        }
        .into(),
        r#final: is_final,
    }
}
