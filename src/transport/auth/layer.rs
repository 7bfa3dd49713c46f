//! Authentication of every gRPC call, as a tower layer under tonic: the bearer token
//! (`authorization: Bearer <token>`) or the mTLS client certificate names the caller,
//! whom the layer puts into the request for the handlers; a call it cannot place is
//! answered `UNAUTHENTICATED` or `PERMISSION_DENIED` before any handler runs. Health
//! and reflection stay open: probes and `grpcurl list` carry no credentials.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, RwLock},
    task::{Context, Poll},
};

use futures_util::future::{Either, Ready, ready};
use tokio::sync::watch;
use tonic_types::StatusExt;

use super::callers::{Caller, Callers};
use super::files;
use super::incoming::PeerInfo;
use crate::base::metrics::Metrics;
use crate::core::domain::CallerName;
use crate::transport::conn_table::StreamGuard;

/// Services anyone may call.
const OPEN: [&str; 3] = [
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// Whether `path` is served to anyone, token or not (health and reflection).
pub fn is_open_path(path: &str) -> bool {
    OPEN.iter().any(|open| path.starts_with(open))
}

/// How msgw knows its callers: the callers file (reloaded when it changes) and
/// whether the TLS handshake verified a client certificate.
#[derive(Debug)]
pub struct Authenticator {
    callers_file: Option<PathBuf>,
    callers: RwLock<Arc<Callers>>,
    mtls: bool,
    anonymous: Arc<Caller>,
}

/// Why a call is refused before it runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials, or unknown ones.
    #[error("{0}")]
    Unauthenticated(String),
    /// Known credentials without an entry that grants anything.
    #[error("{0}")]
    PermissionDenied(String),
}

impl Authenticator {
    /// Loads the callers file, if any (a bad file refuses to start); `mtls`: the gRPC
    /// port verifies client certificates.
    pub fn new(callers_file: Option<PathBuf>, mtls: bool) -> Result<Arc<Self>, String> {
        let callers = match &callers_file {
            Some(path) => Callers::load(path, None)?,
            None => Callers::default(),
        };
        Ok(Arc::new(Self {
            callers_file,
            callers: RwLock::new(Arc::new(callers)),
            mtls,
            anonymous: Arc::new(Caller::anonymous()),
        }))
    }

    /// Whether anyone who reaches the port may call (no callers file, no mTLS).
    pub fn is_open(&self) -> bool {
        self.callers_file.is_none() && !self.mtls
    }

    /// How many callers the callers file lists.
    pub fn callers(&self) -> usize {
        self.current().len()
    }

    fn current(&self) -> Arc<Callers> {
        self.callers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the callers file again; on error the callers loaded before stay.
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.callers_file else {
            return Ok(());
        };
        let callers = Callers::load(path, Some(&self.current()))?;
        tracing::info!(callers = callers.len(), "callers file loaded");
        *self.callers.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(callers);
        Ok(())
    }

    /// Reloads the callers file whenever it changes, until `stop`.
    pub async fn watch(self: Arc<Self>, stop: watch::Receiver<bool>, metrics: Arc<Metrics>) {
        let Some(path) = self.callers_file.clone() else {
            return;
        };
        files::watch(
            "callers",
            vec![path],
            files::RELOAD_EVERY,
            stop,
            &metrics,
            || self.reload(),
        )
        .await;
    }

    /// The caller of a call with `authorization` metadata (if any) on a connection
    /// whose client certificate named `certified` (if any).
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        certified: Option<&str>,
    ) -> Result<Arc<Caller>, AuthError> {
        if self.is_open() {
            return Ok(self.anonymous.clone());
        }
        let callers = self.current();
        if self.callers_file.is_some()
            && let Some(value) = authorization
        {
            let token = bearer(value).ok_or_else(|| {
                AuthError::Unauthenticated(
                    "the authorization metadata must be `Bearer <token>`".into(),
                )
            })?;
            return callers
                .by_token(token)
                .cloned()
                .ok_or_else(|| AuthError::Unauthenticated("unknown bearer token".into()));
        }
        if self.mtls
            && let Some(name) = certified
        {
            let name = CallerName::parse(name).map_err(|e| {
                AuthError::PermissionDenied(format!(
                    "the client certificate's name cannot be a caller name: {e}"
                ))
            })?;
            if self.callers_file.is_none() {
                return Ok(Arc::new(Caller::certified(name)));
            }
            return callers.by_name(&name).cloned().ok_or_else(|| {
                AuthError::PermissionDenied(format!(
                    "the client certificate of {name} has no entry in msgw's callers file"
                ))
            });
        }
        Err(AuthError::Unauthenticated(if self.mtls {
            "a client certificate signed by msgw's client CA is required".into()
        } else {
            "missing `authorization: Bearer <token>` metadata".into()
        }))
    }
}

/// The RPC a call is to (by its `msgw.v1` method name, `"unknown"` for any other
/// path), put into each authenticated call's extensions for its handler.
#[derive(Debug, Clone, Copy)]
pub struct RpcMethod(pub &'static str);

/// The method of a msgw RPC path, `"unknown"` for any other path.
fn method_label(path: &str) -> &'static str {
    path.strip_prefix("/msgw.v1.")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(_, method)| crate::core::rpcs::ALL.iter().find(|m| **m == method))
        .copied()
        .unwrap_or("unknown")
}

/// The token of a `Bearer` authorization value.
fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Charges the call's stream on the gRPC port (if it came through it) to `caller`:
/// refused RESOURCE_EXHAUSTED, with `RetryInfo`, when the caller holds its share of
/// the port's memory budget.
fn charge<B>(request: &http::Request<B>, caller: &Caller) -> Result<(), tonic::Status> {
    let Some(stream) = request.extensions().get::<StreamGuard>() else {
        return Ok(());
    };
    let account = stream.caller_account(caller.label(), caller.memory_share);
    stream.charge(account).map_err(|refused| {
        let mut details = tonic_types::ErrorDetails::new();
        details.set_retry_info(Some(SHARE_RETRY));
        details.set_error_info(
            "CALLER_MEMORY_SHARE",
            "msgw",
            HashMap::from([("caller".to_owned(), caller.label().to_owned())]),
        );
        tonic::Status::with_error_details(
            tonic::Code::ResourceExhausted,
            refused.message(),
            details,
        )
    })
}

/// When a caller refused at its memory share may try again.
const SHARE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Authenticates every call to a msgw service.
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
}

impl AuthLayer {
    /// The layer over `auth`, counting refusals in `metrics`.
    pub fn new(auth: Arc<Authenticator>, metrics: Arc<Metrics>) -> Self {
        Self { auth, metrics }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`AuthLayer`] wraps.
#[derive(Debug, Clone)]
pub struct Authenticate<S> {
    inner: S,
    layer: AuthLayer,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for Authenticate<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<http::Response<R>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        if is_open_path(path) {
            // Health and reflection carry no credentials: what they hold is anonymous.
            let anonymous = self.layer.auth.anonymous.clone();
            if let Err(refused) = charge(&request, &anonymous) {
                return Either::Right(ready(Ok(refused.into_http())));
            }
            return Either::Left(self.inner.call(request));
        }
        let authorization = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(http::HeaderValue::as_bytes);
        let certified = request
            .extensions()
            .get::<PeerInfo>()
            .and_then(|peer| peer.client_name.as_deref());
        match self.layer.auth.authenticate(authorization, certified) {
            Ok(caller) => {
                let method = RpcMethod(method_label(path));
                if let Err(refused) = charge(&request, &caller) {
                    self.layer.metrics.rpc(
                        method.0,
                        caller.label(),
                        refused.code(),
                        std::time::Duration::ZERO,
                    );
                    return Either::Right(ready(Ok(refused.into_http())));
                }
                request.extensions_mut().insert(caller);
                request.extensions_mut().insert(method);
                Either::Left(self.inner.call(request))
            }
            Err(error) => {
                let method = method_label(path);
                let (status, outcome) = match &error {
                    AuthError::Unauthenticated(m) => {
                        (tonic::Status::unauthenticated(m.clone()), "unauthenticated")
                    }
                    AuthError::PermissionDenied(m) => (
                        tonic::Status::permission_denied(m.clone()),
                        "permission_denied",
                    ),
                };
                let peer = request
                    .extensions()
                    .get::<PeerInfo>()
                    .and_then(|p| p.remote_addr)
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                tracing::info!(method, %peer, outcome, error = %error, "rpc refused");
                self.layer
                    .metrics
                    .rpc(method, "unknown", status.code(), std::time::Duration::ZERO);
                Either::Right(ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_calls_are_counted_under_msgws_own_method_names_only() {
        use prost::Message;
        let set =
            prost_types::FileDescriptorSet::decode(crate::transport::proto::FILE_DESCRIPTOR_SET)
                .unwrap();
        let mut rpcs: Vec<String> = set
            .file
            .iter()
            .filter(|f| f.package() == "msgw.v1")
            .flat_map(|f| &f.service)
            .flat_map(|s| s.method.iter().map(|m| m.name().to_owned()))
            .collect();
        let mut listed: Vec<String> = crate::core::rpcs::ALL
            .iter()
            .map(|m| m.to_string())
            .collect();
        rpcs.sort();
        listed.sort();
        assert_eq!(listed, rpcs, "rpcs::ALL lists every RPC of msgw.v1");
        assert!(listed.len() >= 19 && listed.contains(&"StreamStatusEvents".to_owned()));
        assert_eq!(method_label("/msgw.v1.MessagingService/SendSms"), "SendSms");
        assert_eq!(
            method_label("/msgw.v1.MessagingService/Random123"),
            "unknown"
        );
        assert_eq!(method_label("/evil.Service/SendSms"), "unknown");
        assert_eq!(method_label("/"), "unknown");
    }

    #[test]
    fn bearer_values_are_parsed_strictly() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"abc"), None);
        assert_eq!(bearer(b"Bearer \xff"), None);
    }

    #[test]
    fn without_callers_or_mtls_everyone_is_the_anonymous_caller() {
        let auth = Authenticator::new(None, false).unwrap();
        assert!(auth.is_open());
        let caller = auth.authenticate(None, None).unwrap();
        assert!(caller.name.is_none());
    }

    #[test]
    fn mtls_without_a_callers_file_names_the_caller_by_its_certificate() {
        let auth = Authenticator::new(None, true).unwrap();
        assert!(!auth.is_open());
        let caller = auth.authenticate(None, Some("billing.svc")).unwrap();
        assert_eq!(caller.label(), "billing.svc");
        assert!(matches!(
            auth.authenticate(None, None),
            Err(AuthError::Unauthenticated(m)) if m.contains("client certificate")
        ));
        // A stray token (a mesh may add one) does not replace the certificate.
        let caller = auth
            .authenticate(Some(b"Bearer x"), Some("billing.svc"))
            .unwrap();
        assert_eq!(caller.label(), "billing.svc");
    }
}
