//! VerificationService: one-time codes over the gateway's channels (see `verify/`).
//! Each handler parses its request at the border and hands it to the verifier; the
//! caller, its admission, tracing and counting are those of every RPC (`handler.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::convert::{channel, timestamp};
use super::handler;
use crate::core::domain::{
    Channel, ClientId, Error, Permission, Phone, Scope, Text, TextKind, VerificationStatus,
};
use crate::core::verify::{
    self, DEFAULT_DIGITS, DEFAULT_TTL, DIGITS, StartVerification, TTL, Template, Verifier, View,
    guard,
};
use crate::transport::auth::{Asks, Caller};
use crate::transport::proto::{self, verification_service_server::VerificationService};

/// The VerificationService handlers.
#[derive(Debug, Clone)]
pub struct Verification {
    verifier: Verifier,
}

impl Verification {
    /// Handlers over `verifier`.
    pub fn new(verifier: Verifier) -> Self {
        Self { verifier }
    }

    /// Runs one RPC through the pipeline every RPC takes: the `send` permission covers
    /// the service, and the codes it sends (`sends`) come from the caller's send rate;
    /// the request is parsed by `parse`, and `work` answers it.
    async fn rpc<Req, Parsed, Fut>(
        &self,
        request: Request<Req>,
        sends: u32,
        parse: impl FnOnce(Req, &mut Scope<'_>) -> Option<Parsed>,
        work: impl FnOnce(Verifier, Arc<Caller>, Parsed, Option<Instant>) -> Fut,
    ) -> Result<Response<proto::Verification>, Status>
    where
        Fut: Future<Output = Result<View, Error>>,
    {
        let verifier = self.verifier.clone();
        let metrics = verifier.metrics().clone();
        let asks = Asks::Rpc {
            permission: Permission::Send,
            sends,
        };
        handler::pipeline(
            &metrics,
            request,
            |_| asks,
            handler::checked(parse),
            |parsed, call| async move {
                let view = work(verifier, call.caller, parsed, call.deadline).await?;
                Ok((to_proto(view), handler::Provenance::default()))
            },
        )
        .await
    }
}

fn phone(s: &mut Scope<'_>, value: &str) -> Option<Phone> {
    s.check("phone", Phone::parse(value))
}

/// The channels listed (default SMS), and whether all of them are valid; the valid
/// ones decide which other fields are needed even when some are not.
fn channels(s: &mut Scope<'_>, raw: &[i32]) -> (Vec<Channel>, bool) {
    use proto::Channel as P;
    if raw.is_empty() {
        return (vec![Channel::Sms], true);
    }
    let mut list = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (i, value) in raw.iter().enumerate() {
        let field = format!("channels[{i}]");
        let channel = match P::try_from(*value) {
            Ok(P::Sms) => Channel::Sms,
            Ok(P::Viber) => Channel::Viber,
            Ok(P::Rcs) => Channel::Rcs,
            Ok(P::Telegram) => Channel::Telegram,
            Ok(P::Voice) => Channel::Voice,
            Ok(P::Whatsapp) => Channel::Whatsapp,
            Ok(P::Unspecified) | Err(_) => {
                s.add(
                    &field,
                    "must be a channel (CHANNEL_SMS, CHANNEL_VIBER, ...)",
                );
                ok = false;
                continue;
            }
        };
        if list.contains(&channel) {
            s.add(&field, "is listed twice; channels may not repeat");
            ok = false;
            continue;
        }
        list.push(channel);
    }
    (list, ok)
}

fn start(r: proto::StartVerificationRequest, s: &mut Scope<'_>) -> Option<StartVerification> {
    let id = s.check("id", ClientId::new(r.id));
    let phone = phone(s, &r.phone);
    let (listed, channels_ok) = channels(s, &r.channels);
    let message = s.check("message", Template::parse(&r.message));
    let digits = match r.code_length {
        0 => Some(DEFAULT_DIGITS),
        n if DIGITS.contains(&(n as usize)) => Some(n as usize),
        _ => {
            s.add("code_length", "must be 4 to 8 (0: 6)");
            None
        }
    };
    let ttl = match r.ttl {
        None => Some(DEFAULT_TTL),
        Some(d) => match u64::try_from(d.seconds) {
            Ok(secs) if d.nanos == 0 && TTL.contains(&Duration::from_secs(secs)) => {
                Some(Duration::from_secs(secs))
            }
            _ => {
                s.add(
                    "ttl",
                    "must be whole seconds from 60s to 24h (unset: 10 minutes)",
                );
                None
            }
        },
    };
    // Unused by the listed channels, a sender name or voice is ignored: a resend on
    // another channel may repeat the request it resends.
    let signature = if listed.iter().any(|c| verify::needs_signature(*c)) {
        s.check("signature", Text::parse(&r.signature, TextKind::Signature))
            .map(Some)
    } else {
        Some(None)
    };
    // A lone voice channel is a `call/otp` call: the gateway's voice, not this one.
    let voice_step = listed.contains(&Channel::Voice) && listed.len() > 1;
    let voice = match (r.voice, voice_step) {
        (Some(v), true) => super::convert::voice(s, "voice", Some(v)).map(Some),
        (None, true) => {
            s.add(
                "voice",
                "required: CHANNEL_VOICE is one of several channels",
            );
            None
        }
        (_, false) => Some(None),
    };
    let rate_limit_keys = rate_limit_keys(s, r.rate_limit_keys);
    Some(StartVerification {
        id: id?,
        phone: phone?,
        channels: channels_ok.then_some(listed)?,
        signature: signature?,
        message: message?,
        digits: digits?,
        ttl: ttl?,
        voice: voice?,
        rate_limit_keys: rate_limit_keys?,
    })
}

/// The end user's keys: at most 8, each a name the guard can be set for and a
/// bounded value (never repeated back: it may be personal data).
fn rate_limit_keys(
    s: &mut Scope<'_>,
    raw: std::collections::HashMap<String, String>,
) -> Option<guard::RateLimitKeys> {
    if raw.len() > guard::MAX_KEYS {
        s.add(
            "rate_limit_keys",
            format!("at most {} keys", guard::MAX_KEYS),
        );
        return None;
    }
    let mut keys = guard::RateLimitKeys::new();
    let mut ok = true;
    for (name, value) in raw {
        if !guard::settings::is_key_name(&name) {
            s.add(
                "rate_limit_keys",
                "key names are 1 to 32 characters of a-z, 0-9, _ - .",
            );
            ok = false;
        } else if value.is_empty() || value.len() > guard::KEY_VALUE_MAX {
            s.add(
                &format!("rate_limit_keys[{name}]"),
                format!("must be 1 to {} bytes", guard::KEY_VALUE_MAX),
            );
            ok = false;
        } else {
            keys.insert(name, value);
        }
    }
    ok.then_some(keys)
}

fn check(r: proto::CheckVerificationRequest, s: &mut Scope<'_>) -> Option<(Phone, String)> {
    let phone = phone(s, &r.phone);
    let code_ok = (1..=verify::code::MAX_DIGITS).contains(&r.code.len())
        && r.code.bytes().all(|b| b.is_ascii_digit());
    if !code_ok {
        // The value is a code (right or wrong): never repeated back.
        s.add("code", "required: 1 to 16 digits");
    }
    Some((phone?, code_ok.then_some(r.code)?))
}

fn status(s: VerificationStatus) -> proto::VerificationStatus {
    use proto::VerificationStatus as P;
    match s {
        VerificationStatus::Pending => P::Pending,
        VerificationStatus::Approved => P::Approved,
        VerificationStatus::Expired => P::Expired,
        VerificationStatus::Canceled => P::Canceled,
        VerificationStatus::Failed => P::Failed,
    }
}

fn to_proto(view: View) -> proto::Verification {
    let r = view.record;
    proto::Verification {
        id: r.last_send.get(),
        phone: format!("+{}", r.phone.get()),
        channels: r
            .channels
            .iter()
            .map(|c| channel(Some(*c)) as i32)
            .collect(),
        status: status(r.status) as i32,
        expires_at: Some(timestamp(r.expires_at)),
        checks_left: r.checks_left,
        sends_left: r.sends_left,
        sandbox_code: view.sandbox_code.unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl VerificationService for Verification {
    async fn start_verification(
        &self,
        request: Request<proto::StartVerificationRequest>,
    ) -> Result<Response<proto::StartVerificationResponse>, Status> {
        let answer = self
            .rpc(
                request,
                1,
                start,
                |v, caller, parsed, deadline| async move {
                    v.start(caller.name.as_ref(), &parsed, deadline).await
                },
            )
            .await?;
        Ok(answer.map(|v| proto::StartVerificationResponse {
            verification: Some(v),
        }))
    }

    async fn check_verification(
        &self,
        request: Request<proto::CheckVerificationRequest>,
    ) -> Result<Response<proto::CheckVerificationResponse>, Status> {
        let answer = self
            .rpc(
                request,
                0,
                check,
                |v, caller, (phone, code), _| async move {
                    v.check(caller.name.as_ref(), phone, &code).await
                },
            )
            .await?;
        Ok(answer.map(|v| proto::CheckVerificationResponse {
            verification: Some(v),
        }))
    }

    async fn get_verification(
        &self,
        request: Request<proto::GetVerificationRequest>,
    ) -> Result<Response<proto::GetVerificationResponse>, Status> {
        let answer = self
            .rpc(
                request,
                0,
                |r, s| phone(s, &r.phone),
                |v, caller, phone, _| async move { v.get(caller.name.as_ref(), phone).await },
            )
            .await?;
        Ok(answer.map(|v| proto::GetVerificationResponse {
            verification: Some(v),
        }))
    }

    async fn cancel_verification(
        &self,
        request: Request<proto::CancelVerificationRequest>,
    ) -> Result<Response<proto::CancelVerificationResponse>, Status> {
        let answer = self
            .rpc(
                request,
                0,
                |r, s| phone(s, &r.phone),
                |v, caller, phone, _| async move { v.cancel(caller.name.as_ref(), phone).await },
            )
            .await?;
        Ok(answer.map(|v| proto::CancelVerificationResponse {
            verification: Some(v),
        }))
    }
}
