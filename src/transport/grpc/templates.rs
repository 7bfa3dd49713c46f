//! TemplateService: SMS and Viber templates.

use tonic::{Request, Response, Status};

use super::handler;
use crate::core::dispatch::Dispatcher;
use crate::transport::proto::{self, template_service_server::TemplateService};

/// The TemplateService handlers.
#[derive(Debug, Clone)]
pub struct Templates {
    dispatcher: Dispatcher,
}

impl Templates {
    /// Handlers over `dispatcher`.
    pub fn new(dispatcher: Dispatcher) -> Self {
        Self { dispatcher }
    }
}

#[tonic::async_trait]
impl TemplateService for Templates {
    async fn create_sms_template(
        &self,
        request: Request<proto::CreateSmsTemplateRequest>,
    ) -> Result<Response<proto::CreateSmsTemplateResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn list_sms_templates(
        &self,
        request: Request<proto::ListSmsTemplatesRequest>,
    ) -> Result<Response<proto::ListSmsTemplatesResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn delete_sms_templates(
        &self,
        request: Request<proto::DeleteSmsTemplatesRequest>,
    ) -> Result<Response<proto::DeleteSmsTemplatesResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn create_viber_template(
        &self,
        request: Request<proto::CreateViberTemplateRequest>,
    ) -> Result<Response<proto::CreateViberTemplateResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn list_viber_templates(
        &self,
        request: Request<proto::ListViberTemplatesRequest>,
    ) -> Result<Response<proto::ListViberTemplatesResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn delete_viber_templates(
        &self,
        request: Request<proto::DeleteViberTemplatesRequest>,
    ) -> Result<Response<proto::DeleteViberTemplatesResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }
}
