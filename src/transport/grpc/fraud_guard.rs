//! FraudGuardService: operators list and release the ranges the fraud guard holds
//! (`admin` permission). The same as `msgw guard list|release` on the command line.

use std::sync::Arc;

use chrono::Utc;
use tonic::{Request, Response, Status};

use super::convert::{page_size, timestamp};
use super::handler;
use crate::core::domain::{Error, Permission, Scope};
use crate::core::ports::store::RangeHold;
use crate::core::verify::{
    Verifier,
    guard::holds::{self, PAGE_DEFAULT, PAGE_MAX},
};
use crate::transport::auth::Caller;
use crate::transport::proto::{self, fraud_guard_service_server::FraudGuardService};

/// The FraudGuardService handlers.
#[derive(Debug, Clone)]
pub struct FraudGuard {
    verifier: Verifier,
}

impl FraudGuard {
    /// Handlers over `verifier`'s store.
    pub fn new(verifier: Verifier) -> Self {
        Self { verifier }
    }

    /// Runs one RPC through the pipeline every RPC takes: an `admin` caller (one query
    /// of its rate), the request parsed by `parse`, `work` answers.
    async fn rpc<Req, Parsed, Resp, Fut>(
        &self,
        request: Request<Req>,
        parse: impl FnOnce(Req, &mut Scope<'_>) -> Option<Parsed>,
        work: impl FnOnce(Verifier, Arc<Caller>, Parsed) -> Fut,
    ) -> Result<Response<Resp>, Status>
    where
        Fut: Future<Output = Result<Resp, Error>>,
    {
        let verifier = self.verifier.clone();
        let metrics = verifier.metrics().clone();
        handler::checked_query(
            &metrics,
            request,
            Permission::Admin,
            parse,
            |caller, parsed| work(verifier, caller, parsed),
        )
        .await
    }
}

fn to_proto(hold: RangeHold) -> proto::HeldRange {
    proto::HeldRange {
        range: hold.range,
        held_at: Some(timestamp(hold.held_at)),
        held_until: Some(timestamp(hold.until)),
        shadow: hold.shadow,
        unconverted: hold.unconverted,
        approved: hold.approved,
    }
}

fn list(r: proto::ListHeldRangesRequest, s: &mut Scope<'_>) -> Option<(u32, String)> {
    let size = page_size(s, r.page_size, PAGE_DEFAULT, PAGE_MAX);
    let after = match r.page_token.as_str() {
        "" => Some(String::new()),
        token => s.check("page_token", holds::parse_range(token)),
    };
    Some((size?, after?))
}

#[tonic::async_trait]
impl FraudGuardService for FraudGuard {
    async fn list_held_ranges(
        &self,
        request: Request<proto::ListHeldRangesRequest>,
    ) -> Result<Response<proto::ListHeldRangesResponse>, Status> {
        self.rpc(request, list, |v, _, (size, after)| async move {
            let (page, next) = holds::held(v.store().as_ref(), Utc::now(), &after, size).await?;
            Ok(proto::ListHeldRangesResponse {
                ranges: page.into_iter().map(to_proto).collect(),
                next_page_token: next.unwrap_or_default(),
            })
        })
        .await
    }

    async fn release_range(
        &self,
        request: Request<proto::ReleaseRangeRequest>,
    ) -> Result<Response<proto::ReleaseRangeResponse>, Status> {
        self.rpc(
            request,
            |r, s| s.check("range", holds::parse_range(&r.range)),
            |v, caller, range| async move {
                let released =
                    holds::release(v.store().as_ref(), &range, Utc::now(), caller.label()).await?;
                Ok(proto::ReleaseRangeResponse {
                    range: Some(to_proto(released)),
                })
            },
        )
        .await
    }
}
