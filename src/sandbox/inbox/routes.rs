//! The inbox's routes, mounted on msgw's admin port when msgw runs on its sandbox
//! (never with a real gateway), and on `msgw sandbox`'s own port:
//!
//! - `GET /sandbox/` the page (`?q=` filters by phone or id), `GET /sandbox/messages/{id}`
//!   one message's card (what the page's script fetches), `GET /sandbox/events` the
//!   ids of changed messages (server-sent events), `POST /sandbox/messages/{id}/end`
//!   a button's form;
//! - `GET /sandbox/api/messages` (`?phone=`, `?id=`, `?limit=`), `GET
//!   /sandbox/api/messages/{id}` and `POST /sandbox/api/messages/{id}/end` (JSON
//!   `{"status": "UNDELIVERABLE"}` or `{"reply": "text"}`): the JSON twin.
//!
//! A form or a JSON call from another site is refused: the buttons change what msgw's
//! event stream tells, and a page a developer visits must not press them.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::{EndError, Ending, SHOWN, page};
use crate::sandbox::Sandbox;

/// Pages with live updates open at once at most: each holds a connection of the admin
/// port, whose probes must always find one free (see `admin.rs`).
const MAX_LIVE: usize = 8;

/// How often an idle live update says it is still there (proxies close silent ones).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone)]
struct Inbox {
    sandbox: Sandbox,
    stop: watch::Receiver<bool>,
    live: Arc<AtomicUsize>,
}

/// The inbox's routes; live updates end when `stop` turns true.
pub fn router(sandbox: Sandbox, stop: watch::Receiver<bool>) -> Router {
    Router::new()
        .route(
            "/sandbox",
            get(|| async { Redirect::permanent("/sandbox/") }),
        )
        .route("/sandbox/", get(inbox_page))
        .route("/sandbox/events", get(events))
        .route("/sandbox/messages/{id}", get(card))
        .route("/sandbox/messages/{id}/end", post(end_form))
        .route("/sandbox/api/messages", get(api_list))
        .route("/sandbox/api/messages/{id}", get(api_one))
        .route("/sandbox/api/messages/{id}/end", post(api_end))
        .with_state(Inbox {
            sandbox,
            stop,
            live: Arc::default(),
        })
}

#[derive(Deserialize)]
struct Filter {
    #[serde(default)]
    q: String,
}

async fn inbox_page(State(inbox): State<Inbox>, Query(filter): Query<Filter>) -> Html<String> {
    let inner = &inbox.sandbox.inner;
    let shown = super::list(inner, &filter.q, SHOWN);
    Html(page::page(inner, &filter.q, &shown))
}

/// One message's card; 204 when `q` does not match it (the page's filter).
async fn card(
    State(inbox): State<Inbox>,
    Path(id): Path<u64>,
    Query(filter): Query<Filter>,
) -> Response {
    let inner = &inbox.sandbox.inner;
    let record = inner.state().message(id).cloned();
    match record {
        Some(record) if super::matches(&filter.q, id, &record) => {
            Html(page::card(inner, id, &record)).into_response()
        }
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Server-sent events: `message` with the id of each message that changed, `reload`
/// when the page fell too far behind to be told each one.
async fn events(State(inbox): State<Inbox>) -> Response {
    if inbox.live.fetch_add(1, Ordering::AcqRel) >= MAX_LIVE {
        inbox.live.fetch_sub(1, Ordering::AcqRel);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "10")],
            "too many live inbox pages: close one",
        )
            .into_response();
    }
    let changed = super::changed(&inbox.sandbox.inner);
    Sse::new(updates(changed, inbox.stop.clone(), inbox.live.clone()))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// Counts a live page until its stream is dropped.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn updates(
    changed: broadcast::Receiver<u64>,
    stop: watch::Receiver<bool>,
    live: Arc<AtomicUsize>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(
        (changed, stop, Live(live)),
        |(mut changed, mut stop, live)| async move {
            let event = tokio::select! {
                _ = stop.wait_for(|s| *s) => return None,
                received = changed.recv() => match received {
                    Ok(id) => Event::default().event("message").data(id.to_string()),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        Event::default().event("reload").data("")
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            Some((Ok(event), (changed, stop, live)))
        },
    )
}

#[derive(Deserialize)]
struct EndForm {
    #[serde(default)]
    status: String,
    reply: Option<String>,
    #[serde(default)]
    q: String,
}

/// A button of the page without its script: ends the message, back to the page.
async fn end_form(
    State(inbox): State<Inbox>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Form(form): Form<EndForm>,
) -> Response {
    if !same_site(&headers) {
        return (StatusCode::FORBIDDEN, "cross-site form refused").into_response();
    }
    let Some(ending) = Ending::parse(&form.status, form.reply.as_deref()) else {
        return (StatusCode::BAD_REQUEST, "unknown ending").into_response();
    };
    match super::end(&inbox.sandbox, id, &ending) {
        Ok(_) => {
            let query: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("q", &form.q)
                .finish();
            Redirect::to(&format!("/sandbox/?{query}#m-{id}")).into_response()
        }
        Err(e) => end_refused(e),
    }
}

#[derive(Deserialize)]
struct ApiFilter {
    phone: Option<String>,
    id: Option<u64>,
    limit: Option<usize>,
}

async fn api_list(State(inbox): State<Inbox>, Query(filter): Query<ApiFilter>) -> Response {
    let inner = &inbox.sandbox.inner;
    let limit = filter.limit.unwrap_or(SHOWN).clamp(1, 10 * SHOWN);
    let query = match (&filter.id, &filter.phone) {
        (Some(id), _) => id.to_string(),
        (None, Some(phone)) => phone.clone(),
        (None, None) => String::new(),
    };
    let messages: Vec<_> = super::list(inner, &query, limit)
        .into_iter()
        // `id=` is an exact id, not a part of a phone number.
        .filter(|(id, _)| filter.id.is_none_or(|wanted| wanted == *id))
        .map(|(id, record)| super::to_json(inner, id, &record))
        .collect();
    Json(json!({"messages": messages})).into_response()
}

async fn api_one(State(inbox): State<Inbox>, Path(id): Path<u64>) -> Response {
    let inner = &inbox.sandbox.inner;
    let record = inner.state().message(id).cloned();
    match record {
        Some(record) => Json(super::to_json(inner, id, &record)).into_response(),
        None => not_found(),
    }
}

#[derive(Deserialize)]
struct EndRequest {
    #[serde(default)]
    status: String,
    reply: Option<String>,
}

/// Ends a message by hand; `Json` needs `Content-Type: application/json`, which a
/// page of another site cannot send without asking first.
async fn api_end(
    State(inbox): State<Inbox>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Json(request): Json<EndRequest>,
) -> Response {
    if !same_site(&headers) {
        return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
    }
    let Some(ending) = Ending::parse(&request.status, request.reply.as_deref()) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "status must be DELIVERED, UNDELIVERABLE, EXPIRED or REPLIED (with reply), or give reply"})),
        )
            .into_response();
    };
    match super::end(&inbox.sandbox, id, &ending) {
        Ok(record) => Json(super::to_json(&inbox.sandbox.inner, id, &record)).into_response(),
        Err(e) => end_refused(e),
    }
}

fn end_refused(error: EndError) -> Response {
    match error {
        EndError::NotFound => not_found(),
        EndError::NoLetter => (
            StatusCode::CONFLICT,
            Json(json!({"error": "sent before this msgw kept its inbox: where its webhook goes is not known"})),
        )
            .into_response(),
    }
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "no message with this id"})),
    )
        .into_response()
}

/// Whether a request comes from the inbox's own pages (or from no page at all: curl,
/// a test): a browser names the site of the page that sent it.
fn same_site(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority == host),
        (Some(_), None) => false,
        (None, _) => true,
    }
}
