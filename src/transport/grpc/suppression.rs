//! SuppressionService: callers add, remove and read the numbers that opted out (the
//! `suppressions` permission); the same list STOP replies add to (see `optout/`).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert::{page_size, timestamp};
use super::handler;
use crate::core::domain::{
    Error, Permission, Phone, Reason, Scope, Suppression, SuppressionChange, SuppressionEvent,
    SuppressionSource,
};
use crate::core::optout::{PAGE_DEFAULT, PAGE_MAX, Suppressions};
use crate::transport::auth::Caller;
use crate::transport::proto::{self, suppression_service_server::SuppressionService};

/// The SuppressionService handlers.
#[derive(Debug, Clone)]
pub struct SuppressionList {
    list: Suppressions,
}

impl SuppressionList {
    /// Handlers over `list`.
    pub fn new(list: Suppressions) -> Self {
        Self { list }
    }

    /// Runs one RPC through the pipeline every RPC takes: a caller with the
    /// `suppressions` permission (one query of its rate), the request parsed by `parse`,
    /// `work` answers.
    async fn rpc<Req, Parsed, Resp, Fut>(
        &self,
        request: Request<Req>,
        parse: impl FnOnce(Req, &mut Scope<'_>) -> Option<Parsed>,
        work: impl FnOnce(Suppressions, Arc<Caller>, Parsed) -> Fut,
    ) -> Result<Response<Resp>, Status>
    where
        Fut: Future<Output = Result<Resp, Error>>,
    {
        let list = self.list.clone();
        let metrics = list.metrics().clone();
        handler::checked_query(
            &metrics,
            request,
            Permission::Suppressions,
            parse,
            |caller, parsed| work(list, caller, parsed),
        )
        .await
    }
}

/// How the proto names a source.
fn source(s: SuppressionSource) -> proto::SuppressionSource {
    match s {
        SuppressionSource::Reply => proto::SuppressionSource::Reply,
        SuppressionSource::Api => proto::SuppressionSource::Api,
    }
}

/// An entry as proto.
fn entry(s: Suppression) -> proto::Suppression {
    proto::Suppression {
        phone: s.phone.get().to_string(),
        source: source(s.source).into(),
        reason: s.reason.into_string(),
        id: s.client_id.map_or(0, |id| id.get()),
        caller: s.caller.map(|c| c.as_str().to_owned()).unwrap_or_default(),
        create_time: Some(timestamp(s.created_at)),
    }
}

/// A list change of the event log as proto.
pub fn event(e: SuppressionEvent) -> proto::SuppressionEvent {
    let SuppressionChange {
        phone,
        suppressed,
        source: from,
        reason,
        client_id,
        caller,
        at,
    } = e.change;
    proto::SuppressionEvent {
        cursor: e.cursor.get(),
        phone: phone.get().to_string(),
        suppressed,
        source: source(from).into(),
        reason: reason.into_string(),
        id: client_id.map_or(0, |id| id.get()),
        caller: caller.map(|c| c.as_str().to_owned()).unwrap_or_default(),
        time: Some(timestamp(at)),
    }
}

fn phone(s: &mut Scope<'_>, value: &str) -> Option<Phone> {
    s.check("phone", Phone::parse(value))
}

/// A number and a reason.
fn change(phone_text: &str, reason: &str, s: &mut Scope<'_>) -> Option<(Phone, Reason)> {
    let phone = phone(s, phone_text);
    let reason = s.check("reason", Reason::parse(reason));
    Some((phone?, reason?))
}

fn list(r: proto::ListSuppressionsRequest, s: &mut Scope<'_>) -> Option<(u32, Option<Phone>)> {
    let size = page_size(s, r.page_size, PAGE_DEFAULT, PAGE_MAX);
    let after = match r.page_token.as_str() {
        "" => Some(None),
        token => s.check("page_token", Phone::parse(token)).map(Some),
    };
    Some((size?, after?))
}

#[tonic::async_trait]
impl SuppressionService for SuppressionList {
    async fn add_suppression(
        &self,
        request: Request<proto::AddSuppressionRequest>,
    ) -> Result<Response<proto::AddSuppressionResponse>, Status> {
        self.rpc(
            request,
            |r, s| change(&r.phone, &r.reason, s),
            |list, caller, (phone, reason)| async move {
                let added = list.add(caller.name.as_ref(), phone, reason).await?;
                Ok(proto::AddSuppressionResponse {
                    suppression: Some(entry(added)),
                })
            },
        )
        .await
    }

    async fn remove_suppression(
        &self,
        request: Request<proto::RemoveSuppressionRequest>,
    ) -> Result<Response<proto::RemoveSuppressionResponse>, Status> {
        self.rpc(
            request,
            |r, s| change(&r.phone, &r.reason, s),
            |list, caller, (phone, reason)| async move {
                let removed = list.remove(caller.name.as_ref(), phone, reason).await?;
                Ok(proto::RemoveSuppressionResponse {
                    suppression: Some(entry(removed)),
                })
            },
        )
        .await
    }

    async fn get_suppression(
        &self,
        request: Request<proto::GetSuppressionRequest>,
    ) -> Result<Response<proto::GetSuppressionResponse>, Status> {
        self.rpc(
            request,
            |r, s| phone(s, &r.phone),
            |list, _, phone| async move {
                Ok(proto::GetSuppressionResponse {
                    suppression: Some(entry(list.get(phone).await?)),
                })
            },
        )
        .await
    }

    async fn list_suppressions(
        &self,
        request: Request<proto::ListSuppressionsRequest>,
    ) -> Result<Response<proto::ListSuppressionsResponse>, Status> {
        self.rpc(request, list, |list, _, (size, after)| async move {
            let (page, next) = list.list(after, size).await?;
            Ok(proto::ListSuppressionsResponse {
                suppressions: page.into_iter().map(entry).collect(),
                next_page_token: next.map(|p| p.get().to_string()).unwrap_or_default(),
            })
        })
        .await
    }
}
