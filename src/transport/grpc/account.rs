//! AccountService: balance, sender names (shared and fresh, see core/queries), HLR
//! lookups.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::handler::{self, Rpc};
use crate::core::queries::Queries;
use crate::transport::proto::{self, account_service_server::AccountService};

/// The AccountService handlers.
#[derive(Debug, Clone)]
pub struct Account {
    queries: Arc<Queries>,
}

impl Account {
    /// Handlers over `queries`.
    pub fn new(queries: Arc<Queries>) -> Self {
        Self { queries }
    }

    async fn query<Req: Rpc<Resp>, Resp>(
        &self,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status> {
        let queries = &self.queries;
        handler::unary_with(
            queries.dispatcher(),
            request,
            |ops, lanes, deadline, caller| async move {
                queries
                    .execute_all(ops, lanes, deadline, caller.name.as_ref())
                    .await
            },
        )
        .await
    }
}

#[tonic::async_trait]
impl AccountService for Account {
    async fn get_balance(
        &self,
        request: Request<proto::GetBalanceRequest>,
    ) -> Result<Response<proto::GetBalanceResponse>, Status> {
        self.query(request).await
    }

    async fn list_senders(
        &self,
        request: Request<proto::ListSendersRequest>,
    ) -> Result<Response<proto::ListSendersResponse>, Status> {
        self.query(request).await
    }

    async fn lookup_hlr(
        &self,
        request: Request<proto::LookupHlrRequest>,
    ) -> Result<Response<proto::LookupHlrResponse>, Status> {
        self.query(request).await
    }
}
