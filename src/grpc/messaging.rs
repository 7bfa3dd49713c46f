//! MessagingService: sends on every channel, Batch, and status queries.

use std::sync::Arc;

use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::handler;
use crate::dispatch::Dispatcher;
use crate::domain::{Error, Operation};
use crate::events::{
    EventLog,
    wait::{self, MAX_WAIT},
};
use crate::proto::{self, messaging_service_server::MessagingService};

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
        handler::unary(&self.dispatcher, "SendSms", request).await
    }

    async fn send_viber(
        &self,
        request: Request<proto::SendViberRequest>,
    ) -> Result<Response<proto::SendViberResponse>, Status> {
        handler::unary(&self.dispatcher, "SendViber", request).await
    }

    async fn send_rcs(
        &self,
        request: Request<proto::SendRcsRequest>,
    ) -> Result<Response<proto::SendRcsResponse>, Status> {
        handler::unary(&self.dispatcher, "SendRcs", request).await
    }

    async fn send_telegram_otp(
        &self,
        request: Request<proto::SendTelegramOtpRequest>,
    ) -> Result<Response<proto::SendTelegramOtpResponse>, Status> {
        handler::unary(&self.dispatcher, "SendTelegramOtp", request).await
    }

    async fn send_voice(
        &self,
        request: Request<proto::SendVoiceRequest>,
    ) -> Result<Response<proto::SendVoiceResponse>, Status> {
        handler::unary(&self.dispatcher, "SendVoice", request).await
    }

    async fn send_voice_otp(
        &self,
        request: Request<proto::SendVoiceOtpRequest>,
    ) -> Result<Response<proto::SendVoiceOtpResponse>, Status> {
        handler::unary(&self.dispatcher, "SendVoiceOtp", request).await
    }

    async fn send_pipeline(
        &self,
        request: Request<proto::SendPipelineRequest>,
    ) -> Result<Response<proto::SendPipelineResponse>, Status> {
        handler::unary(&self.dispatcher, "SendPipeline", request).await
    }

    async fn get_message_status(
        &self,
        request: Request<proto::GetMessageStatusRequest>,
    ) -> Result<Response<proto::GetMessageStatusResponse>, Status> {
        if !request.get_ref().wait_for_final {
            return handler::unary(&self.dispatcher, "GetMessageStatus", request).await;
        }
        let until =
            super::deadline::deadline(&request).unwrap_or_else(|| Instant::now() + MAX_WAIT);
        let caller = crate::auth::caller_of(&request)?;
        let query = proto::GetMessageStatusRequest {
            wait_for_final: false,
            ..request.into_inner()
        };
        let metrics = self.dispatcher.metrics();
        handler::observed(metrics, "GetMessageStatus", &caller, async {
            let op = handler::parse(query)?;
            handler::record_operations(std::slice::from_ref(&op));
            crate::auth::admit(&caller, std::slice::from_ref(&op), false)?;
            handler::own_messages_only(&self.dispatcher, &caller, std::slice::from_ref(&op), false)
                .await?;
            let Operation::GetMessageStatus(id) = op else {
                return Err(Error::Internal(format!(
                    "a status request parsed as {op:?}"
                )));
            };
            let waited = wait::final_status(&self.events, &self.dispatcher, id, until).await;
            handler::count_operation(
                self.dispatcher.metrics(),
                "GetMessageStatus",
                waited.as_ref().err(),
            );
            Ok((waited?.into(), false))
        })
        .await
    }

    async fn batch(
        &self,
        request: Request<proto::BatchRequest>,
    ) -> Result<Response<proto::BatchResponse>, Status> {
        handler::unary(&self.dispatcher, "Batch", request).await
    }
}
