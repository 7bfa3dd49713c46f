//! MessagingService: sends on every channel, Batch, and status queries.

use tonic::{Request, Response, Status};

use super::handler;
use crate::dispatch::Dispatcher;
use crate::proto::{self, messaging_service_server::MessagingService};

/// The MessagingService handlers.
#[derive(Debug, Clone)]
pub struct Messaging {
    dispatcher: Dispatcher,
}

impl Messaging {
    /// Handlers over `dispatcher`.
    pub fn new(dispatcher: Dispatcher) -> Self {
        Self { dispatcher }
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
        handler::unary(&self.dispatcher, "GetMessageStatus", request).await
    }

    async fn batch(
        &self,
        request: Request<proto::BatchRequest>,
    ) -> Result<Response<proto::BatchResponse>, Status> {
        handler::unary(&self.dispatcher, "Batch", request).await
    }
}
