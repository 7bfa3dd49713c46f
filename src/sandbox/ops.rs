//! One operation of an envelope: routing by `type` and the result item.

use serde_json::{Map, Value, json};

use super::error::OpError;
use super::fields::Fields;
use super::sends::RcsFallback;
use super::{Inner, account, pipeline, sends, templates};

/// Runs one `data[]` item and returns its result item.
pub(super) fn run(inner: &std::sync::Arc<Inner>, item: &Value) -> Value {
    let result = match item {
        Value::Object(obj) => dispatch(inner, obj),
        _ => Err(OpError::NotObject),
    };
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("?");
    match result {
        Ok(data) => {
            tracing::debug!(op = kind, "sandbox operation succeeded");
            json!({"success": true, "data": data})
        }
        Err(err) => {
            tracing::debug!(op = kind, error = %err, "sandbox operation failed");
            let mut out = json!({"success": false, "error": err.to_string()});
            // A failed operation echoes the client's id (docs/gateway.md#errors, rule 3).
            if let Some(id) = item.get("id").filter(|id| id.is_number() || id.is_string()) {
                out["data"] = json!({"id": id});
            }
            out
        }
    }
}

fn dispatch(inner: &std::sync::Arc<Inner>, obj: &Map<String, Value>) -> Result<Value, OpError> {
    let fields = Fields::new(obj);
    let kind = match obj.get("type") {
        None | Some(Value::Null) => return Err(OpError::missing("type")),
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => return Err(OpError::InvalidType),
    };
    match kind {
        "sms" => sends::sms(inner, &fields),
        "viber" => sends::viber(inner, &fields, false),
        "viber+sms" => sends::viber(inner, &fields, true),
        "rcs" => sends::rcs(inner, &fields, RcsFallback::None),
        "rcs+sms" => sends::rcs(inner, &fields, RcsFallback::Sms),
        "rcs+viber+sms" => sends::rcs(inner, &fields, RcsFallback::ViberSms),
        "telegram" => sends::telegram(inner, &fields),
        "voice" => sends::voice(inner, &fields),
        "call/otp" => account::call_otp(inner, &fields),
        "pipeline" => pipeline::send(inner, &fields),
        "hlr" => account::hlr(inner, &fields),
        "balance" => Ok(account::balance(inner)),
        "sender" => Ok(account::senders(inner)),
        "status" => account::status(inner, &fields),
        "template/create" => templates::create_sms(inner, &fields),
        "template/list" => Ok(templates::list_sms(inner)),
        "template/delete" => templates::delete_sms(inner, &fields),
        "template/viber/create" => templates::create_viber(inner, &fields),
        "template/viber/list" => Ok(templates::list_viber(inner)),
        "template/viber/delete" => templates::delete_viber(inner, &fields),
        // `whatsapp` is only reachable through `pipeline` (docs/gateway.md#pipeline, rule 4).
        _ => Err(OpError::InvalidType),
    }
}
