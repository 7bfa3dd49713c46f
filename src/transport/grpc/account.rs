//! AccountService: balance, sender names, HLR lookups.

use tonic::{Request, Response, Status};

use super::handler;
use crate::core::dispatch::Dispatcher;
use crate::transport::proto::{self, account_service_server::AccountService};

/// The AccountService handlers.
#[derive(Debug, Clone)]
pub struct Account {
    dispatcher: Dispatcher,
}

impl Account {
    /// Handlers over `dispatcher`.
    pub fn new(dispatcher: Dispatcher) -> Self {
        Self { dispatcher }
    }
}

#[tonic::async_trait]
impl AccountService for Account {
    async fn get_balance(
        &self,
        request: Request<proto::GetBalanceRequest>,
    ) -> Result<Response<proto::GetBalanceResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn list_senders(
        &self,
        request: Request<proto::ListSendersRequest>,
    ) -> Result<Response<proto::ListSendersResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }

    async fn lookup_hlr(
        &self,
        request: Request<proto::LookupHlrRequest>,
    ) -> Result<Response<proto::LookupHlrResponse>, Status> {
        handler::unary(&self.dispatcher, request).await
    }
}
