//! SMS and Viber templates, kept in memory.

use serde_json::{Value, json};

use super::Inner;
use super::billing;
use super::error::OpError;
use super::fields::Fields;
use super::state::{SmsTemplate, ViberTemplate};
use super::status;

/// A Viber template is approved once this many step delays have passed.
const MODERATION_STEPS: u32 = 3;

/// `template/create`: `{"id","name","template","chars","parts"}`.
pub fn create_sms(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    let text = f.req_str("template")?;
    let name = f.opt_str("name")?.unwrap_or_default();
    let size = billing::sms_size(text);
    let mut state = inner.state();
    let template = SmsTemplate {
        id: state.next_template_id(),
        name: name.to_owned(),
        template: text.to_owned(),
        chars: size.chars,
        parts: size.parts,
        created: status::now_rfc3339(),
    };
    let out = json!({
        "id": template.id,
        "name": template.name,
        "template": template.template,
        "chars": template.chars,
        "parts": template.parts,
    });
    state.add_sms_template(template);
    Ok(out)
}

/// `template/list`: every SMS template with its creation time.
pub fn list_sms(inner: &Inner) -> Value {
    let state = inner.state();
    let items = state.sms_templates.iter().map(|t| {
        json!({
            "id": t.id,
            "name": t.name,
            "template": t.template,
            "chars": t.chars,
            "parts": t.parts,
            "created": t.created,
        })
    });
    Value::Array(items.collect())
}

/// `template/delete`: by `id` (a string) and/or exact `template` text.
pub fn delete_sms(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    let id = f.opt_str("id")?.filter(|id| !id.is_empty());
    let text = f.opt_str("template")?.filter(|t| !t.is_empty());
    if id.is_none() && text.is_none() {
        return Err(OpError::MissingIdOrTemplate);
    }
    let wanted_id = id.map(|id| id.parse().ok());
    let deleted = inner
        .state()
        .delete_sms_templates(|t| matches(t.id, &t.template, wanted_id, text));
    Ok(json!({"deleted": deleted}))
}

/// `template/viber/create`: `{"id","status":"moderation"}`.
pub fn create_viber(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    let text = f.req_str("template")?;
    let signature = f.opt_str("signature")?.unwrap_or_default();
    if !signature.is_empty() && !inner.is_sender(signature) {
        return Err(OpError::SenderName);
    }
    let mut state = inner.state();
    let id = state.next_template_id();
    state.add_viber_template(ViberTemplate {
        id,
        template: text.to_owned(),
        signature: signature.to_owned(),
        created: std::time::Instant::now(),
    });
    Ok(json!({"id": id, "status": "moderation"}))
}

/// `template/viber/list`: `[{"id","template","signature","status"}]`.
pub fn list_viber(inner: &Inner) -> Value {
    let moderation = inner.config.step_delay.saturating_mul(MODERATION_STEPS);
    let state = inner.state();
    let items = state.viber_templates.iter().map(|t| {
        let status = if t.created.elapsed() >= moderation {
            "approved"
        } else {
            "moderation"
        };
        json!({"id": t.id, "template": t.template, "signature": t.signature, "status": status})
    });
    Value::Array(items.collect())
}

/// `template/viber/delete`: by `id` (an integer) and/or exact `template` text.
pub fn delete_viber(inner: &Inner, f: &Fields) -> Result<Value, OpError> {
    let id = f.opt_u64("id")?;
    let text = f.opt_str("template")?.filter(|t| !t.is_empty());
    if id.is_none() && text.is_none() {
        return Err(OpError::MissingIdOrTemplate);
    }
    let deleted = inner
        .state()
        .delete_viber_templates(|t| matches(t.id, &t.template, id.map(Some), text));
    Ok(json!({"deleted": deleted}))
}

/// Whether a template is selected by id or by exact text. `wanted_id` is
/// `Some(None)` for an id that cannot be any template's (it selects nothing).
fn matches(id: u64, text: &str, wanted_id: Option<Option<u64>>, wanted_text: Option<&str>) -> bool {
    wanted_id.flatten() == Some(id) || wanted_text == Some(text)
}
