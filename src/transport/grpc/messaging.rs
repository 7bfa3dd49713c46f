//! MessagingService: sends on every channel, Batch, status queries, cancelling a
//! scheduled message, counting an SMS text's parts, and what msgw knows of a number.

use std::sync::Arc;

use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::convert::{estimate, estimate_text, looked_up, timestamp};
use super::handler::{self, Provenance, Rpc};
use super::schedule::{TimedRequest, batch_timings, timing};
use crate::core::dispatch::{Dispatcher, Executed, Lanes};
use crate::core::domain::{ClientId, Error, Operation, Output, Permission, Phone, estimate_sms};
use crate::core::events::EventLog;
use crate::core::queries::Queries;
use crate::core::schedule::Scheduler;
use crate::core::verify::numbers::NumberRule;
use crate::core::wait::{self, MAX_WAIT};
use crate::transport::auth::Asks;
use crate::transport::proto::{self, messaging_service_server::MessagingService};

/// The MessagingService handlers.
#[derive(Clone)]
pub struct Messaging {
    dispatcher: Dispatcher,
    scheduler: Arc<Scheduler>,
    queries: Arc<Queries>,
    events: Arc<EventLog>,
    numbers: NumberRule,
}

impl Messaging {
    /// Handlers over `scheduler` (and its dispatcher); `queries` answers status
    /// queries, with `events` when they wait for a final status; `numbers` says where
    /// verification codes go (LookupNumber).
    pub fn new(
        scheduler: Arc<Scheduler>,
        queries: Arc<Queries>,
        events: Arc<EventLog>,
        numbers: NumberRule,
    ) -> Self {
        Self {
            dispatcher: scheduler.dispatcher().clone(),
            scheduler,
            queries,
            events,
            numbers,
        }
    }

    /// Runs a send RPC: now, or kept until its `send_at`.
    async fn send<Req, Resp>(&self, request: Request<Req>) -> Result<Response<Resp>, Status>
    where
        Req: Rpc<Resp> + TimedRequest,
    {
        let timed = timing(request.get_ref(), "send_at");
        let scheduler = &self.scheduler;
        handler::unary_with(
            &self.dispatcher,
            request,
            |ops, lanes, deadline, caller| async move {
                let timed = timed?;
                let ops = ops.into_iter().map(|op| (op, timed)).collect();
                scheduler
                    .execute_all(ops, lanes, deadline, caller.name.as_ref())
                    .await
            },
        )
        .await
    }
}

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn send_sms(
        &self,
        request: Request<proto::SendSmsRequest>,
    ) -> Result<Response<proto::SendSmsResponse>, Status> {
        self.send(request).await
    }

    async fn send_viber(
        &self,
        request: Request<proto::SendViberRequest>,
    ) -> Result<Response<proto::SendViberResponse>, Status> {
        self.send(request).await
    }

    async fn send_rcs(
        &self,
        request: Request<proto::SendRcsRequest>,
    ) -> Result<Response<proto::SendRcsResponse>, Status> {
        self.send(request).await
    }

    async fn send_telegram_otp(
        &self,
        request: Request<proto::SendTelegramOtpRequest>,
    ) -> Result<Response<proto::SendTelegramOtpResponse>, Status> {
        self.send(request).await
    }

    async fn send_voice(
        &self,
        request: Request<proto::SendVoiceRequest>,
    ) -> Result<Response<proto::SendVoiceResponse>, Status> {
        self.send(request).await
    }

    async fn send_voice_otp(
        &self,
        request: Request<proto::SendVoiceOtpRequest>,
    ) -> Result<Response<proto::SendVoiceOtpResponse>, Status> {
        self.send(request).await
    }

    async fn send_pipeline(
        &self,
        request: Request<proto::SendPipelineRequest>,
    ) -> Result<Response<proto::SendPipelineResponse>, Status> {
        self.send(request).await
    }

    async fn get_message_status(
        &self,
        request: Request<proto::GetMessageStatusRequest>,
    ) -> Result<Response<proto::GetMessageStatusResponse>, Status> {
        if !request.get_ref().wait_for_final {
            // From msgw's store, a lookup shared or fresh, or a new one (core/queries).
            let queries = &self.queries;
            return handler::unary_with(
                &self.dispatcher,
                request,
                |ops, lanes, deadline, caller| async move {
                    queries
                        .execute_all(ops, lanes, deadline, caller.name.as_ref())
                        .await
                },
            )
            .await;
        }
        let until =
            super::deadline::deadline(&request).unwrap_or_else(|| Instant::now() + MAX_WAIT);
        let account = handler::account_of(&request);
        // Parsed as a plain status query (`wait_for_final` is for this handler only;
        // a Batch item may not wait).
        let (metadata, extensions, query) = request.into_parts();
        let query = proto::GetMessageStatusRequest {
            wait_for_final: false,
            ..query
        };
        let request = Request::from_parts(metadata, extensions, query);
        let (events, queries) = (&self.events, &self.queries);
        handler::unary_with(&self.dispatcher, request, move |ops, _, _, _| async move {
            let [Operation::GetMessageStatus(id)] = ops[..] else {
                return Err(Error::Internal(format!(
                    "a status request parsed as {ops:?}"
                )));
            };
            let waited = wait::final_status(events, queries, id, until, account).await;
            Ok(vec![waited.map(|(w, source)| Executed {
                output: Output::Waited(w),
                replayed: false,
                source: Some(source),
            })])
        })
        .await
    }

    async fn cancel_message(
        &self,
        request: Request<proto::CancelMessageRequest>,
    ) -> Result<Response<proto::CancelMessageResponse>, Status> {
        let scheduler = &self.scheduler;
        handler::pipeline(
            self.dispatcher.metrics(),
            request,
            |_| asks(Permission::Send),
            handler::checked(|r: proto::CancelMessageRequest, s| {
                s.check("id", ClientId::new(r.id))
            }),
            |id, call| async move {
                tracing::Span::current().record("client_id", id.get());
                let canceled = scheduler.cancel(id, call.caller.name.as_ref()).await?;
                let response = proto::CancelMessageResponse {
                    id: canceled.id.get(),
                    send_at: Some(timestamp(canceled.send_at)),
                    cancel_time: Some(timestamp(canceled.at)),
                };
                Ok((response, Provenance::default()))
            },
        )
        .await
    }

    async fn estimate_sms(
        &self,
        request: Request<proto::EstimateSmsRequest>,
    ) -> Result<Response<proto::EstimateSmsResponse>, Status> {
        handler::pipeline(
            self.dispatcher.metrics(),
            request,
            |_| asks(Permission::Send),
            handler::checked(estimate_text),
            |text, _| async move { Ok((estimate(estimate_sms(text.as_str())), Provenance::default())) },
        )
        .await
    }

    async fn lookup_number(
        &self,
        request: Request<proto::LookupNumberRequest>,
    ) -> Result<Response<proto::LookupNumberResponse>, Status> {
        let numbers = &self.numbers;
        handler::pipeline(
            self.dispatcher.metrics(),
            request,
            |_| asks(Permission::Query),
            handler::checked(|r: proto::LookupNumberRequest, s| {
                s.check("phone", Phone::parse(&r.phone))
            }),
            |phone, _| async move { Ok((looked_up(numbers.judge(phone)), Provenance::default())) },
        )
        .await
    }

    async fn batch(
        &self,
        request: Request<proto::BatchRequest>,
    ) -> Result<Response<proto::BatchResponse>, Status> {
        let timings = batch_timings(&request.get_ref().items);
        let (scheduler, queries) = (&self.scheduler, &self.queries);
        handler::unary_with(
            &self.dispatcher,
            request,
            |ops, lanes, deadline, caller| async move {
                // Parsed items keep their order: one timing each.
                let timings = timings?;
                if timings.len() != ops.len() {
                    return Err(Error::Internal(format!(
                        "{} timings for {} batch items",
                        timings.len(),
                        ops.len()
                    )));
                }
                // Status items as a lone GetMessageStatus is answered (core/queries);
                // the others now, or kept until their `send_at`, each in its lane.
                let items = ops
                    .into_iter()
                    .zip(timings)
                    .enumerate()
                    .map(|(i, (op, timing))| (op, (timing, lanes.of(i))))
                    .collect();
                queries
                    .execute_batch(items, deadline, |others| {
                        let (ops, lanes): (Vec<_>, Vec<_>) = others
                            .into_iter()
                            .map(|(op, (timing, lane))| ((op, timing), lane))
                            .unzip();
                        scheduler.execute_all(
                            ops,
                            Lanes::Each(lanes),
                            deadline,
                            caller.name.as_ref(),
                        )
                    })
                    .await
            },
        )
        .await
    }
}

/// What an RPC of this service that is no gateway operation asks: `permission`, and one
/// query of the caller's rate (it sends nothing).
fn asks(permission: Permission) -> Asks {
    Asks::Rpc {
        permission,
        sends: 0,
    }
}

#[cfg(test)]
mod future_size_tests;
