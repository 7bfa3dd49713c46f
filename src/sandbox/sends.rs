//! Send operations: validation per type, then acceptance (billing, record, delivery).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Inner;
use super::billing::{self, Units};
use super::channel::Channel;
use super::delivery;
use super::error::OpError;
use super::fields::Fields;
use super::inbox;
use super::magic::Magic;
use super::message::{Delivery, Letter, Piece, Target};
use super::viber;

/// Bounds of `sms_lifetime` in seconds (docs/gateway.md#limits).
const SMS_LIFETIME: (u64, u64) = (3_600, 259_200);

/// Least lifetime of Viber, RCS and Telegram messages in seconds (docs/gateway.md#limits).
const MIN_CHANNEL_LIFETIME: u64 = 60;

/// Fallback chain of an RCS send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RcsFallback {
    None,
    Sms,
    ViberSms,
}

/// A validated send, ready to be accepted.
pub struct SendPlan<'a> {
    pub id: u64,
    pub phone: u64,
    /// Channels tried in order; never empty.
    pub channels: Vec<Channel>,
    /// Parts billed on the first channel.
    pub parts: u32,
    pub price: Units,
    /// Signatures that must be registered sender names.
    pub signatures: Vec<&'a str>,
    pub target: Target,
    pub dtmf: bool,
    /// What each channel shows, for the inbox.
    pub pieces: Vec<Piece>,
    /// The one-time code it carries, when the sandbox made it (`call/otp`); else
    /// found in the texts.
    pub code: Option<String>,
}

impl<'a> SendPlan<'a> {
    /// A plan billed at the first channel's part price.
    pub fn new(id: u64, phone: u64, channels: Vec<Channel>, parts: u32) -> Self {
        let first = channels.first().copied().unwrap_or(Channel::Sms);
        Self {
            id,
            phone,
            price: billing::part_price(first).saturating_mul(Units::from(parts)),
            channels,
            parts,
            signatures: Vec::new(),
            target: Target::None,
            dtmf: false,
            pieces: Vec::new(),
            code: None,
        }
    }
}

/// `sms`.
pub fn sms(inner: &Arc<Inner>, f: &Fields) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    let message = f.req_str("sms_message")?;
    let signature = f.req_str("sms_signature")?;
    sms_options(f)?;
    let mut plan = SendPlan::new(id, phone, vec![Channel::Sms], sms_parts(message));
    plan.signatures = vec![signature];
    plan.target = hook(f)?;
    plan.pieces = inbox::pieces(f, &plan.channels, false);
    send_result(inner, plan)
}

/// `viber` and `viber+sms`.
pub fn viber(inner: &Arc<Inner>, f: &Fields, with_sms: bool) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    let viber_signature = f.req_str("viber_signature")?;
    viber::content(f)?;
    f.lifetime("viber_lifetime", MIN_CHANNEL_LIFETIME, u64::MAX)?;
    let mut plan = SendPlan::new(id, phone, vec![Channel::Viber], 1);
    plan.signatures = vec![viber_signature];
    if with_sms {
        plan.signatures.push(sms_fallback(f)?);
        plan.channels.push(Channel::Sms);
    }
    plan.target = hook(f)?;
    plan.pieces = inbox::pieces(f, &plan.channels, false);
    send_result(inner, plan)
}

/// `rcs`, `rcs+sms` and `rcs+viber+sms`.
pub fn rcs(inner: &Arc<Inner>, f: &Fields, fallback: RcsFallback) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    f.req_str("rcs_message")?;
    let rcs_signature = f.req_str("rcs_signature")?;
    f.req_link("rcs_image")?;
    f.req_str("rcs_button")?;
    f.req_link("rcs_link")?;
    f.lifetime("rcs_lifetime", MIN_CHANNEL_LIFETIME, u64::MAX)?;
    let mut plan = SendPlan::new(id, phone, vec![Channel::Rcs], 1);
    plan.signatures = vec![rcs_signature];
    if fallback != RcsFallback::None {
        let sms_signature = sms_fallback(f)?;
        if fallback == RcsFallback::ViberSms {
            plan.signatures.push(f.req_str("viber_signature")?);
            viber::content(f)?;
            f.lifetime("viber_lifetime", MIN_CHANNEL_LIFETIME, u64::MAX)?;
            plan.channels.push(Channel::Viber);
        }
        plan.signatures.push(sms_signature);
        plan.channels.push(Channel::Sms);
    }
    plan.target = hook(f)?;
    plan.pieces = inbox::pieces(f, &plan.channels, false);
    send_result(inner, plan)
}

/// `telegram` (one-time password).
pub fn telegram(inner: &Arc<Inner>, f: &Fields) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    telegram_otp(f)?;
    f.lifetime("telegram_lifetime", MIN_CHANNEL_LIFETIME, u64::MAX)?;
    let mut plan = SendPlan::new(id, phone, vec![Channel::Telegram], 1);
    plan.target = hook(f)?;
    plan.pieces = inbox::pieces(f, &plan.channels, false);
    send_result(inner, plan)
}

/// `voice` (text-to-speech call, shape in docs/gateway.md#voice).
pub fn voice(inner: &Arc<Inner>, f: &Fields) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    f.req_str("message")?;
    voice_profile(&f.req_object("voice")?)?;
    let mut plan = SendPlan::new(id, phone, vec![Channel::Voice], 1);
    plan.dtmf = f.opt_bool("dtmf")?.unwrap_or(false);
    plan.target = hook(f)?;
    plan.pieces = inbox::pieces(f, &plan.channels, false);
    send_result(inner, plan)
}

/// Telegram `message`: a one-time password of 4 to 8 digits.
pub fn telegram_otp(f: &Fields) -> Result<(), OpError> {
    let otp = f.req_str("message")?;
    if (4..=8).contains(&otp.len()) && otp.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(OpError::invalid(f.path("message")))
    }
}

/// A voice profile object: `gender` (male|female), `language`, `name`.
pub fn voice_profile(v: &Fields) -> Result<(), OpError> {
    match v.req_str("gender")? {
        "male" | "female" => {}
        _ => return Err(OpError::invalid(v.path("gender"))),
    }
    v.req_str("language")?;
    v.req_str("name")?;
    Ok(())
}

/// Parts of an SMS text.
pub fn sms_parts(message: &str) -> u32 {
    billing::sms_size(message).parts
}

/// Options every SMS-carrying send may have.
fn sms_options(f: &Fields) -> Result<(), OpError> {
    f.lifetime("sms_lifetime", SMS_LIFETIME.0, SMS_LIFETIME.1)?;
    f.opt_bool("unsubscribe_link")?;
    Ok(())
}

/// The SMS fallback fields (both required); returns the SMS signature.
fn sms_fallback<'a>(f: &Fields<'a>) -> Result<&'a str, OpError> {
    f.req_str("sms_message")?;
    let signature = f.req_str("sms_signature")?;
    sms_options(f)?;
    Ok(signature)
}

/// `hook` and `short_link`, common to the hooked sends.
fn hook(f: &Fields) -> Result<Target, OpError> {
    f.opt_bool("short_link")?;
    Ok(f.opt_link("hook")?
        .map_or(Target::None, |url| Target::Hook(url.to_owned())))
}

/// Accepts `plan` and returns the send-result payload (fixture shape).
pub fn send_result(inner: &Arc<Inner>, plan: SendPlan) -> Result<Value, OpError> {
    let (id, parts) = (plan.id, plan.parts);
    let msg_id = accept(inner, plan)?;
    Ok(json!({"id": id, "msg_id": msg_id, "data": 1, "parts": parts}))
}

/// Checks sender names and magic numbers, charges, records the message and
/// starts its delivery; returns the gateway message id.
pub fn accept(inner: &Arc<Inner>, plan: SendPlan) -> Result<u64, OpError> {
    let magic = Magic::of(plan.phone);
    if magic == Magic::SenderName || plan.signatures.iter().any(|s| !inner.is_sender(s)) {
        return Err(OpError::SenderName);
    }
    if magic == Magic::Blocked {
        return Err(OpError::Blocked);
    }
    let first = *plan
        .channels
        .first()
        .ok_or_else(|| OpError::missing("pipeline"))?;
    let letter = Letter {
        received: super::status::now_rfc3339(),
        phone: plan.phone,
        code: plan.code.clone().or_else(|| inbox::code_in(&plan.pieces)),
        pieces: plan.pieces,
        cost: plan.price,
        target: plan.target.clone(),
        dtmf: plan.dtmf,
    };
    let msg_id = {
        let mut state = inner.state();
        state.charge(plan.price)?;
        state.start_message(plan.id, first, Some(letter))
    };
    tracing::info!(
        id = plan.id,
        msg_id,
        channel = first.name(),
        parts = plan.parts,
        "sandbox accepted message"
    );
    delivery::spawn(
        inner.clone(),
        Delivery {
            id: plan.id,
            msg_id,
            channels: plan.channels,
            magic,
            dtmf: plan.dtmf,
            target: plan.target,
        },
    );
    Ok(msg_id)
}
