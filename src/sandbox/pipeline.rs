//! `pipeline`: several channels tried in order, the only way to send WhatsApp.

use std::sync::Arc;

use serde_json::Value;

use super::Inner;
use super::channel::Channel;
use super::error::OpError;
use super::fields::Fields;
use super::message::Target;
use super::sends::{self, SendPlan};
use super::viber::VIBER_TYPES;

/// Validates and accepts a pipeline send. Settings objects of channels not
/// listed in `pipeline` are ignored, as the gateway does not say they matter.
pub fn send(inner: &Arc<Inner>, f: &Fields) -> Result<Value, OpError> {
    let (id, phone) = (f.id()?, f.phone()?);
    let channels = channels(f)?;
    // Validated for type only: the gateway never calls it (docs/gateway.md#pipeline, rule 3).
    f.opt_link("hook")?;
    let mut signatures = Vec::new();
    let mut parts = 1;
    for (index, channel) in channels.iter().enumerate() {
        let settings = f.req_object(channel.name())?;
        match channel {
            Channel::Sms => {
                let message = settings.req_str("message")?;
                signatures.push(settings.req_str("signature")?);
                if index == 0 {
                    parts = sends::sms_parts(message);
                }
            }
            Channel::Telegram => sends::telegram_otp(&settings)?,
            Channel::Viber => {
                settings.req_str("message")?;
                signatures.push(settings.req_str("signature")?);
                let viber_type = settings.req_str("type")?;
                if !VIBER_TYPES.contains(&viber_type) {
                    return Err(OpError::invalid(settings.path("type")));
                }
            }
            Channel::Voice => sends::voice_profile(&settings)?,
            Channel::Rcs => {
                signatures.push(settings.req_str("signature")?);
                settings.req_str("message")?;
            }
            // Not validated, even without a signature (docs/gateway.md#pipeline, rule 2).
            Channel::Whatsapp => {}
        }
    }
    let mut plan = SendPlan::new(id, phone, channels, parts);
    plan.signatures = signatures;
    plan.target = Target::Account;
    plan.pieces = super::inbox::pieces(f, &plan.channels, true);
    sends::send_result(inner, plan)
}

/// The `pipeline` array: known channel names, at least one, no repeats.
fn channels(f: &Fields) -> Result<Vec<Channel>, OpError> {
    let names = f
        .opt_array("pipeline")?
        .ok_or_else(|| OpError::missing("pipeline"))?;
    if names.is_empty() {
        return Err(OpError::invalid("pipeline"));
    }
    let mut channels = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_str().ok_or_else(|| OpError::invalid("pipeline"))?;
        let channel = Channel::from_pipeline_name(name)
            .ok_or_else(|| OpError::UnknownChannel(name.to_owned()))?;
        if channels.contains(&channel) {
            return Err(OpError::RepeatedChannel(name.to_owned()));
        }
        channels.push(channel);
    }
    Ok(channels)
}
