//! Account operations: balance, sender names, status, HLR and voice OTP.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Inner;
use super::billing::{self, CALL_OTP_PRICE, HLR_PRICE};
use super::channel::Channel;
use super::error::OpError;
use super::fields::Fields;
use super::hlr;
use super::sends::{self, SendPlan};

/// Status of every registered sender name (the one value the gateway shows).
const SENDER_STATUS: &str = "Verified by operator";

/// `balance`: `{"amount", "currency"}`.
pub fn balance(inner: &Inner) -> Value {
    let units = inner.state().balance();
    json!({"amount": billing::amount_json(units), "currency": inner.config.currency})
}

/// `sender`: every registered sender name.
pub fn senders(inner: &Inner) -> Value {
    let names = inner.config.senders.iter();
    Value::Array(
        names
            .map(|name| json!({"name": name, "status": SENDER_STATUS}))
            .collect(),
    )
}

/// `status`: the current record of a client message id.
pub fn status(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    let id = f.id()?;
    let state = inner.state();
    let record = state.message(id).ok_or(OpError::NotFound)?;
    Ok(record.to_json(id))
}

/// `hlr`: a deterministic lookup result for the number, billed per lookup.
pub fn hlr(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    f.id()?;
    let phone = f.phone()?;
    inner.state().charge(HLR_PRICE)?;
    Ok(hlr::lookup(phone))
}

/// `call/otp`: a voice call from a number whose last 4 digits are the code.
///
/// The calling number is `380445` followed by `(phone + id) mod 1_000_000`,
/// so the code is `(phone + id) mod 10_000`, zero-padded: predictable in tests.
pub fn call_otp(inner: &Arc<Inner>, f: &Fields) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    let mut plan = SendPlan::new(id, phone, vec![Channel::Voice], 1);
    plan.price = CALL_OTP_PRICE;
    let caller = 380_445_000_000 + phone.wrapping_add(id) % 1_000_000;
    let code = format!("{:04}", caller % 10_000);
    // What the phone shows: a missed call from a number that ends with the code.
    plan.pieces = vec![super::message::Piece {
        channel: Channel::Voice,
        sender: Some(format!("+{caller}")),
        text: Some(format!(
            "Incoming call from +{caller}: the code is its last 4 digits"
        )),
        extras: Vec::new(),
    }];
    plan.code = Some(code.clone());
    sends::accept(inner, plan)?;
    // The calling number ends with the code, which is never logged.
    tracing::debug!(id, "sandbox voice OTP call");
    Ok(json!({"code": code, "price": billing::amount_json(CALL_OTP_PRICE)}))
}
