//! Requests that send nothing: message status, balance, senders, HLR, templates.

use super::{IntoOperation, recipient, text};
use crate::core::domain::OpKind;
use crate::core::domain::{ClientId, Operation, Scope, TemplateSelector, Text, TextKind};
use crate::transport::proto;

impl IntoOperation for proto::GetMessageStatusRequest {
    const KIND: OpKind = OpKind::GetMessageStatus;

    /// The query itself; waiting (`wait_for_final`) is the RPC's, which clears the flag
    /// before this, so a flag still set here is a Batch item's.
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        if self.wait_for_final {
            s.add(
                "wait_for_final",
                "not allowed in a Batch item: call GetMessageStatus to wait",
            );
        }
        s.check("id", ClientId::new(self.id))
            .map(Operation::GetMessageStatus)
    }
}

impl IntoOperation for proto::GetBalanceRequest {
    const KIND: OpKind = OpKind::GetBalance;

    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::GetBalance)
    }
}

impl IntoOperation for proto::ListSendersRequest {
    const KIND: OpKind = OpKind::ListSenders;

    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListSenders)
    }
}

impl IntoOperation for proto::LookupHlrRequest {
    const KIND: OpKind = OpKind::LookupHlr;

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        recipient(self.id, &self.phone, s).map(Operation::LookupHlr)
    }
}

impl IntoOperation for proto::CreateSmsTemplateRequest {
    const KIND: OpKind = OpKind::CreateSmsTemplate;

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = text(s, "text", TextKind::Message, &self.text);
        let name = s.check("name", Text::optional(&self.name, TextKind::Short));
        Some(Operation::CreateSmsTemplate {
            text: body?,
            name: name?,
        })
    }
}

impl IntoOperation for proto::ListSmsTemplatesRequest {
    const KIND: OpKind = OpKind::ListSmsTemplates;

    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListSmsTemplates)
    }
}

impl IntoOperation for proto::DeleteSmsTemplatesRequest {
    const KIND: OpKind = OpKind::DeleteSmsTemplates;

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let id = s.check("id", Text::optional(&self.id, TextKind::Short));
        let body = s.check("text", Text::optional(&self.text, TextKind::Message));
        selector(s, id?, body?).map(Operation::DeleteSmsTemplates)
    }
}

impl IntoOperation for proto::CreateViberTemplateRequest {
    const KIND: OpKind = OpKind::CreateViberTemplate;

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = text(s, "text", TextKind::Message, &self.text);
        let signature = s.check(
            "signature",
            Text::optional(&self.signature, TextKind::Signature),
        );
        Some(Operation::CreateViberTemplate {
            text: body?,
            signature: signature?,
        })
    }
}

impl IntoOperation for proto::ListViberTemplatesRequest {
    const KIND: OpKind = OpKind::ListViberTemplates;

    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListViberTemplates)
    }
}

impl IntoOperation for proto::DeleteViberTemplatesRequest {
    const KIND: OpKind = OpKind::DeleteViberTemplates;

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = s.check("text", Text::optional(&self.text, TextKind::Message));
        selector(s, (self.id != 0).then_some(self.id), body?).map(Operation::DeleteViberTemplates)
    }
}

fn selector<Id>(
    s: &mut Scope<'_>,
    id: Option<Id>,
    text: Option<Text>,
) -> Option<TemplateSelector<Id>> {
    if id.is_none() && text.is_none() {
        s.add(
            "id",
            "required: an id or a text (or both) selects the templates to delete",
        );
        return None;
    }
    Some(TemplateSelector { id, text })
}
