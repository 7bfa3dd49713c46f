//! MessagingService: sends on every channel, Batch, status queries, cancelling a
//! scheduled message, and counting an SMS text's parts.

use std::sync::Arc;

use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::convert::{estimate, estimate_text};
use super::handler;
use crate::core::dispatch::{Dispatcher, Executed};
use crate::core::domain::{Error, Operation, Output, Permission, Violations, estimate_sms};
use crate::core::events::EventLog;
use crate::core::wait::{self, MAX_WAIT};
use crate::transport::auth;
use crate::transport::proto::{self, messaging_service_server::MessagingService};

/// The MessagingService handlers.
#[derive(Clone)]
pub struct Messaging {
    dispatcher: Dispatcher,
    events: Arc<EventLog>,
}

impl Messaging {
    /// Handlers over `dispatcher`; `events` answers waits for a final status.
    pub fn new(dispatcher: Dispatcher, events: Arc<EventLog>) -> Self {
        Self { dispatcher, events }
    }
}

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn send_sms(
        &self,
        request: Request<proto::SendSmsRequest>,
    ) -> Result<Response<proto::SendSmsResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_viber(
        &self,
        request: Request<proto::SendViberRequest>,
    ) -> Result<Response<proto::SendViberResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_rcs(
        &self,
        request: Request<proto::SendRcsRequest>,
    ) -> Result<Response<proto::SendRcsResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_telegram_otp(
        &self,
        request: Request<proto::SendTelegramOtpRequest>,
    ) -> Result<Response<proto::SendTelegramOtpResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_voice(
        &self,
        request: Request<proto::SendVoiceRequest>,
    ) -> Result<Response<proto::SendVoiceResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_voice_otp(
        &self,
        request: Request<proto::SendVoiceOtpRequest>,
    ) -> Result<Response<proto::SendVoiceOtpResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn send_pipeline(
        &self,
        request: Request<proto::SendPipelineRequest>,
    ) -> Result<Response<proto::SendPipelineResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn get_message_status(
        &self,
        request: Request<proto::GetMessageStatusRequest>,
    ) -> Result<Response<proto::GetMessageStatusResponse>, Status> {
        if !request.get_ref().wait_for_final {
            return handler::unary(&self.dispatcher, request).await;
        }
        let until =
            super::deadline::deadline(&request).unwrap_or_else(|| Instant::now() + MAX_WAIT);
        // Parsed as a plain status query (`wait_for_final` is for this handler only;
        // a Batch item may not wait).
        let (metadata, extensions, query) = request.into_parts();
        let query = proto::GetMessageStatusRequest {
            wait_for_final: false,
            ..query
        };
        let request = Request::from_parts(metadata, extensions, query);
        let (events, dispatcher) = (&self.events, &self.dispatcher);
        handler::unary_with(dispatcher, request, |ops, _, _| async move {
            let [Operation::GetMessageStatus(id)] = ops[..] else {
                return Err(Error::Internal(format!(
                    "a status request parsed as {ops:?}"
                )));
            };
            let waited = wait::final_status(events, dispatcher, id, until).await;
            Ok(vec![waited.map(|w| Executed {
                output: Output::Waited(w),
                replayed: false,
            })])
        })
        .await
    }

    async fn cancel_message(
        &self,
        _request: Request<proto::CancelMessageRequest>,
    ) -> Result<Response<proto::CancelMessageResponse>, Status> {
        Err(Status::unimplemented(
            "CancelMessage: scheduled sends are not built yet",
        ))
    }

    async fn estimate_sms(
        &self,
        request: Request<proto::EstimateSmsRequest>,
    ) -> Result<Response<proto::EstimateSmsResponse>, Status> {
        let caller = auth::caller_of(&request)?;
        let method = auth::method_of(&request);
        handler::observed(self.dispatcher.metrics(), method, &caller, async {
            auth::admit_rpc(&caller, method, Permission::Send)?;
            let mut violations = Violations::new();
            let text = estimate_text(request.into_inner(), &mut violations.scope(""));
            let text = violations.finish(text)?;
            Ok((estimate(estimate_sms(text.as_str())), false))
        })
        .await
    }

    async fn batch(
        &self,
        request: Request<proto::BatchRequest>,
    ) -> Result<Response<proto::BatchResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }
}
