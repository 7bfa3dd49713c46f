//! Batch: many operations in one gateway envelope, one result each.

use tonic::{Code, Status};

use super::convert::{FromOutput, IntoOperation, counted_parts};
use super::handler::{Provenance, Rpc};
use super::status::to_rpc_status;
use crate::core::dispatch::Executed;
use crate::core::domain::{Error, OpKind, Operation, SmsEstimate, Violations};
use crate::transport::auth::Asks;
use crate::transport::proto::{
    BatchItem, BatchRequest, BatchResponse, BatchResult, batch_item::Operation as Item,
    batch_result::Result as Res,
};

/// Most items in one batch whatever `MSGW_UPSTREAM_BATCH_MAX` says: keeps one
/// envelope (and one failure) bounded.
pub const MAX_ITEMS: usize = 100;

/// A batch: its items share one envelope, and each gets its own result.
impl Rpc<BatchResponse> for BatchRequest {
    const BATCH: bool = true;

    /// Each item's kind, and the parts msgw counted for an SMS text.
    type Shape = Vec<(Kind, Option<SmsEstimate>)>;

    fn asks(&self) -> Asks {
        Asks::Batch(
            self.items
                .iter()
                .map(|item| item.operation.as_ref().map(asked))
                .collect(),
        )
    }

    fn plan(self, batch_max: usize) -> Result<(Vec<Operation>, Self::Shape), Error> {
        let (shape, ops) = parse(self.items, batch_max.min(MAX_ITEMS))?
            .into_iter()
            .map(|(kind, op)| ((kind, counted_parts(&op)), op))
            .unzip();
        Ok((ops, shape))
    }

    fn respond(
        shape: Self::Shape,
        results: Vec<Result<Executed, Error>>,
    ) -> Result<(BatchResponse, Provenance), Error> {
        let results = shape
            .into_iter()
            .zip(results)
            .map(|((kind, counted), outcome)| result(kind, counted, outcome))
            .collect();
        // Each item says whether it was replayed and, a status item, where its answer
        // came from; the call itself says neither.
        Ok((BatchResponse { results }, Provenance::default()))
    }
}

/// Parses every item (at most `max_items`); any violation fails the whole batch
/// before anything is sent.
pub fn parse(items: Vec<BatchItem>, max_items: usize) -> Result<Vec<(Kind, Operation)>, Error> {
    let mut violations = Violations::new();
    if items.is_empty() {
        violations
            .scope("")
            .add("items", "required: at least one item");
    }
    if items.len() > max_items {
        violations.scope("").add(
            "items",
            format!(
                "at most {max_items} items (one gateway request, MSGW_UPSTREAM_BATCH_MAX), has {}",
                items.len()
            ),
        );
    }
    let mut parsed = Vec::with_capacity(items.len());
    let mut keyed = std::collections::HashMap::new();
    for (i, item) in items.into_iter().enumerate() {
        let Some(item) = item.operation else {
            violations
                .scope(format!("items[{i}]"))
                .add("operation", "required: one operation");
            continue;
        };
        let (kind, field, op) = parse_item(item, &mut violations, i);
        match op {
            Some(op) => {
                // Each keyed item is idempotent on its own id: one id, one item.
                if let Some(id) = op.idempotency_key() {
                    let first = *keyed.entry(id).or_insert(i);
                    if first != i {
                        violations.scope(format!("items[{i}].{field}")).add(
                            "id",
                            format!("id {id} is already used by items[{first}]; each send in a batch needs its own id"),
                        );
                    }
                }
                parsed.push((kind, op));
            }
            None if violations.is_empty() => {
                violations
                    .scope(format!("items[{i}]"))
                    .add(field, "invalid");
            }
            None => {}
        }
    }
    violations.finish(Some(parsed))
}

/// The batch result of one item: its status, and its response when OK.
fn result(
    kind: Kind,
    counted: Option<SmsEstimate>,
    outcome: Result<Executed, Error>,
) -> BatchResult {
    let replayed = outcome.as_ref().is_ok_and(|e| e.replayed);
    let answer_source = outcome
        .as_ref()
        .ok()
        .filter(|_| matches!(kind, Kind::GetMessageStatus))
        .and_then(|e| e.source)
        .map(|source| source.as_str().to_owned())
        .unwrap_or_default();
    let converted = outcome.and_then(|Executed { output, .. }| respond_item(kind, counted, output));
    match converted {
        Ok(result) => BatchResult {
            status: Some(tonic_types::pb::Status {
                code: Code::Ok as i32,
                message: String::new(),
                details: Vec::new(),
            }),
            result: Some(result),
            replayed,
            answer_source,
        },
        Err(e) => BatchResult {
            status: Some(to_rpc_status(&Status::from(e))),
            result: None,
            replayed: false,
            answer_source: String::new(),
        },
    }
}

/// The one list of what a Batch item can be: each entry names the `BatchItem` and
/// `BatchResult` variant (the RPC's name) and the item's proto field, and defines the
/// item kinds, their parsing and their answers. A new batchable RPC is one entry here.
macro_rules! batchable {
    ($($variant:ident => $field:literal),* $(,)?) => {
        /// How to answer an item: the response type of its RPC.
        #[derive(Clone, Copy)]
        pub enum Kind {
            $($variant,)*
        }

        /// An item's kind, the priority it asks and its field name, read before it is
        /// parsed.
        fn asked(item: &Item) -> (OpKind, i32, &'static str) {
            match item {
                $(Item::$variant(r) => (OpKind::$variant, r.asked_priority(), $field),)*
            }
        }

        /// Parses one item (`items[i]`), collecting its violations.
        fn parse_item(
            item: Item,
            v: &mut Violations,
            i: usize,
        ) -> (Kind, &'static str, Option<Operation>) {
            match item {
                $(Item::$variant(r) => (
                    Kind::$variant,
                    $field,
                    r.into_operation(&mut v.scope(format!("items[{i}].{}", $field))),
                ),)*
            }
        }

        /// The response of an item of `kind` from its output.
        fn respond_item(
            kind: Kind,
            counted: Option<SmsEstimate>,
            output: crate::core::domain::Output,
        ) -> Result<Res, Error> {
            match kind {
                $(Kind::$variant => FromOutput::from_output(output)
                    .map(|r| Res::$variant(FromOutput::counted(r, counted))),)*
            }
        }
    };
}

batchable!(
    SendSms => "send_sms",
    SendViber => "send_viber",
    SendRcs => "send_rcs",
    SendTelegramOtp => "send_telegram_otp",
    SendVoice => "send_voice",
    SendVoiceOtp => "send_voice_otp",
    SendPipeline => "send_pipeline",
    GetMessageStatus => "get_message_status",
    GetBalance => "get_balance",
    ListSenders => "list_senders",
    LookupHlr => "lookup_hlr",
    CreateSmsTemplate => "create_sms_template",
    ListSmsTemplates => "list_sms_templates",
    DeleteSmsTemplates => "delete_sms_templates",
    CreateViberTemplate => "create_viber_template",
    ListViberTemplates => "list_viber_templates",
    DeleteViberTemplates => "delete_viber_templates",
);
