//! What msgw must know of each kind of operation, decided in one table
//! ([`OpKind::facts`]): its RPC, the permission it needs, whether its client id makes it
//! exactly-once, whether its delivery is tracked, whether it takes a hook, whether it
//! changes state, whether it reaches a person (whom an opt-out protects) and whether it
//! may be kept to leave later (`send_at`). A new operation does not compile until its row
//! is written.

use std::time::Duration;

use super::{Channel, ClientId, Lifetime, Operation, Permission, Phone, PipelineStep};
use crate::core::rpcs::template_service as templates;
use crate::core::rpcs::{account_service as account, messaging_service as messaging};

/// The kinds of operation, one per RPC that asks the gateway for one thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    SendSms,
    SendViber,
    SendRcs,
    SendTelegramOtp,
    SendVoice,
    SendVoiceOtp,
    SendPipeline,
    GetMessageStatus,
    GetBalance,
    ListSenders,
    LookupHlr,
    CreateSmsTemplate,
    ListSmsTemplates,
    DeleteSmsTemplates,
    CreateViberTemplate,
    ListViberTemplates,
    DeleteViberTemplates,
}

/// What a retry of the same client id does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// Nothing keeps it: a retry asks the gateway again (queries, lookups, templates).
    None,
    /// The client id is the key: the gateway gets it at most once, and a retry replays
    /// the first answer, rebuilt from the gateway's message id if that answer was lost.
    ClientId,
    /// The client id is the key, and the first answer holds what only it has (a voice
    /// OTP call's code): once lost, a retry is told so instead of getting a rebuilt one.
    ClientIdAnswerOnce,
}

/// How msgw treats one kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The RPC that asks for it alone: its name in metrics, logs and errors.
    pub rpc: &'static str,
    /// What a caller needs to ask for it.
    pub permission: Permission,
    /// What a retry of its client id does.
    pub idempotency: Idempotency,
    /// The gateway reports its delivery later: msgw records the message, streams its
    /// status events and polls the status of those whose report is lost.
    pub tracked: bool,
    /// The gateway posts its final status to the message's own `hook` (a pipeline
    /// reports to the account's address instead).
    pub hook: bool,
    /// Running it twice could do something twice (send, charge, create, delete): its
    /// outcome is unknown when its request may have reached the gateway.
    pub changes_state: bool,
    /// It reaches the person at its number (a message, a call): a number on the
    /// suppression list refuses it.
    pub reaches_recipient: bool,
    /// It may be kept to leave at a `send_at` ahead (see core/schedule): msgw keeps its
    /// request, and nothing of its answer is needed before it leaves.
    pub schedulable: bool,
}

impl Facts {
    /// A send of a message whose delivery msgw tracks through its hook.
    const fn send(rpc: &'static str) -> Self {
        Self {
            rpc,
            permission: Permission::Send,
            idempotency: Idempotency::ClientId,
            tracked: true,
            hook: true,
            changes_state: true,
            reaches_recipient: true,
            schedulable: true,
        }
    }

    /// A read that changes nothing.
    const fn query(rpc: &'static str, permission: Permission) -> Self {
        Self {
            rpc,
            permission,
            idempotency: Idempotency::None,
            tracked: false,
            hook: false,
            changes_state: false,
            reaches_recipient: false,
            schedulable: false,
        }
    }

    /// A change of the account's templates: not keyed, so a retry may do it again.
    const fn template_change(rpc: &'static str) -> Self {
        Self {
            rpc,
            permission: Permission::Templates,
            idempotency: Idempotency::None,
            tracked: false,
            hook: false,
            changes_state: true,
            reaches_recipient: false,
            schedulable: false,
        }
    }
}

impl OpKind {
    /// Every kind.
    pub const ALL: [Self; 17] = [
        Self::SendSms,
        Self::SendViber,
        Self::SendRcs,
        Self::SendTelegramOtp,
        Self::SendVoice,
        Self::SendVoiceOtp,
        Self::SendPipeline,
        Self::GetMessageStatus,
        Self::GetBalance,
        Self::ListSenders,
        Self::LookupHlr,
        Self::CreateSmsTemplate,
        Self::ListSmsTemplates,
        Self::DeleteSmsTemplates,
        Self::CreateViberTemplate,
        Self::ListViberTemplates,
        Self::DeleteViberTemplates,
    ];

    /// The table: every fact of every kind, decided here and nowhere else.
    pub const fn facts(self) -> Facts {
        match self {
            Self::SendSms => Facts::send(messaging::SEND_SMS),
            Self::SendViber => Facts::send(messaging::SEND_VIBER),
            Self::SendRcs => Facts::send(messaging::SEND_RCS),
            Self::SendTelegramOtp => Facts::send(messaging::SEND_TELEGRAM_OTP),
            Self::SendVoice => Facts::send(messaging::SEND_VOICE),
            // A call that says a code: its answer holds the code, it has no delivery;
            // the code is the answer to the call that places it, and msgw keeps it
            // nowhere, so it is never kept for later.
            Self::SendVoiceOtp => Facts {
                rpc: messaging::SEND_VOICE_OTP,
                permission: Permission::Send,
                idempotency: Idempotency::ClientIdAnswerOnce,
                tracked: false,
                hook: false,
                changes_state: true,
                reaches_recipient: true,
                schedulable: false,
            },
            // Tracked like any send, but reported to the account's webhook address.
            Self::SendPipeline => Facts {
                hook: false,
                ..Facts::send(messaging::SEND_PIPELINE)
            },
            Self::GetMessageStatus => {
                Facts::query(messaging::GET_MESSAGE_STATUS, Permission::Query)
            }
            Self::GetBalance => Facts::query(account::GET_BALANCE, Permission::Query),
            Self::ListSenders => Facts::query(account::LIST_SENDERS, Permission::Query),
            // Charged per lookup, but a repeat costs only money, not a message to a person;
            // it does not notify the subscriber, so an opt-out does not refuse it.
            Self::LookupHlr => Facts {
                changes_state: true,
                ..Facts::query(account::LOOKUP_HLR, Permission::Query)
            },
            Self::CreateSmsTemplate => Facts::template_change(templates::CREATE_SMS_TEMPLATE),
            Self::ListSmsTemplates => {
                Facts::query(templates::LIST_SMS_TEMPLATES, Permission::Templates)
            }
            Self::DeleteSmsTemplates => Facts::template_change(templates::DELETE_SMS_TEMPLATES),
            Self::CreateViberTemplate => Facts::template_change(templates::CREATE_VIBER_TEMPLATE),
            Self::ListViberTemplates => {
                Facts::query(templates::LIST_VIBER_TEMPLATES, Permission::Templates)
            }
            Self::DeleteViberTemplates => Facts::template_change(templates::DELETE_VIBER_TEMPLATES),
        }
    }
}

impl Operation {
    /// Its kind.
    pub const fn kind(&self) -> OpKind {
        match self {
            Self::SendSms(_) => OpKind::SendSms,
            Self::SendViber(_) => OpKind::SendViber,
            Self::SendRcs(_) => OpKind::SendRcs,
            Self::SendTelegramOtp(_) => OpKind::SendTelegramOtp,
            Self::SendVoice(_) => OpKind::SendVoice,
            Self::SendVoiceOtp(_) => OpKind::SendVoiceOtp,
            Self::SendPipeline(_) => OpKind::SendPipeline,
            Self::GetMessageStatus(_) => OpKind::GetMessageStatus,
            Self::GetBalance => OpKind::GetBalance,
            Self::ListSenders => OpKind::ListSenders,
            Self::LookupHlr(_) => OpKind::LookupHlr,
            Self::CreateSmsTemplate { .. } => OpKind::CreateSmsTemplate,
            Self::ListSmsTemplates => OpKind::ListSmsTemplates,
            Self::DeleteSmsTemplates(_) => OpKind::DeleteSmsTemplates,
            Self::CreateViberTemplate { .. } => OpKind::CreateViberTemplate,
            Self::ListViberTemplates => OpKind::ListViberTemplates,
            Self::DeleteViberTemplates(_) => OpKind::DeleteViberTemplates,
        }
    }

    /// Its facts.
    pub const fn facts(&self) -> Facts {
        self.kind().facts()
    }

    /// The RPC that asks for this operation alone (its name in metrics).
    pub const fn rpc_name(&self) -> &'static str {
        self.facts().rpc
    }

    /// The client message id the operation is about, if any.
    pub fn client_id(&self) -> Option<ClientId> {
        match self {
            Self::SendSms(op) => Some(op.to.id),
            Self::SendViber(op) => Some(op.to.id),
            Self::SendRcs(op) => Some(op.to.id),
            Self::SendTelegramOtp(op) => Some(op.to.id),
            Self::SendVoice(op) => Some(op.to.id),
            Self::SendPipeline(op) => Some(op.to.id),
            Self::SendVoiceOtp(to) | Self::LookupHlr(to) => Some(to.id),
            Self::GetMessageStatus(id) => Some(*id),
            Self::GetBalance
            | Self::ListSenders
            | Self::CreateSmsTemplate { .. }
            | Self::ListSmsTemplates
            | Self::DeleteSmsTemplates(_)
            | Self::CreateViberTemplate { .. }
            | Self::ListViberTemplates
            | Self::DeleteViberTemplates(_) => None,
        }
    }

    /// The idempotency key: the client id of an operation its facts key by it.
    pub fn idempotency_key(&self) -> Option<ClientId> {
        match self.facts().idempotency {
            Idempotency::None => None,
            Idempotency::ClientId | Idempotency::ClientIdAnswerOnce => self.client_id(),
        }
    }

    /// For a message whose delivery is tracked: its client id, first channel, and how
    /// long the gateway may keep trying (the gateway's default when not set).
    pub fn delivery(&self) -> Option<(ClientId, Channel, Duration)> {
        if !self.facts().tracked {
            return None;
        }
        let secs = |l: Option<Lifetime>, channel: Channel| {
            l.map_or(channel.default_lifetime(), |l| {
                Duration::from_secs(u64::from(l.seconds()))
            })
        };
        let (channel, lifetime) = match self {
            Self::SendSms(op) => (Channel::Sms, secs(op.lifetime, Channel::Sms)),
            Self::SendViber(op) => (Channel::Viber, secs(op.lifetime, Channel::Viber)),
            Self::SendRcs(op) => (Channel::Rcs, secs(op.lifetime, Channel::Rcs)),
            Self::SendTelegramOtp(op) => (Channel::Telegram, secs(op.lifetime, Channel::Telegram)),
            Self::SendVoice(_) => (Channel::Voice, Channel::Voice.default_lifetime()),
            // The gateway tries the steps in turn; the longest default covers them all.
            Self::SendPipeline(op) => (
                op.steps.first().map(PipelineStep::channel)?,
                Channel::Sms.default_lifetime(),
            ),
            // Their facts say they are not tracked.
            Self::SendVoiceOtp(_)
            | Self::GetMessageStatus(_)
            | Self::GetBalance
            | Self::ListSenders
            | Self::LookupHlr(_)
            | Self::CreateSmsTemplate { .. }
            | Self::ListSmsTemplates
            | Self::DeleteSmsTemplates(_)
            | Self::CreateViberTemplate { .. }
            | Self::ListViberTemplates
            | Self::DeleteViberTemplates(_) => return None,
        };
        Some((self.client_id()?, channel, lifetime))
    }

    /// The number this operation reaches the person at (a send or a call): the one an
    /// opt-out refuses it for.
    pub fn recipient(&self) -> Option<Phone> {
        if !self.facts().reaches_recipient {
            return None;
        }
        match self {
            Self::SendSms(op) => Some(op.to.phone),
            Self::SendViber(op) => Some(op.to.phone),
            Self::SendRcs(op) => Some(op.to.phone),
            Self::SendTelegramOtp(op) => Some(op.to.phone),
            Self::SendVoice(op) => Some(op.to.phone),
            Self::SendPipeline(op) => Some(op.to.phone),
            Self::SendVoiceOtp(to) | Self::LookupHlr(to) => Some(to.phone),
            Self::GetMessageStatus(_)
            | Self::GetBalance
            | Self::ListSenders
            | Self::CreateSmsTemplate { .. }
            | Self::ListSmsTemplates
            | Self::DeleteSmsTemplates(_)
            | Self::CreateViberTemplate { .. }
            | Self::ListViberTemplates
            | Self::DeleteViberTemplates(_) => None,
        }
    }

    /// Whether the gateway posts this operation's final status to its `hook`.
    pub const fn takes_hook(&self) -> bool {
        self.facts().hook
    }

    /// Whether running it twice could do something twice (send, charge, create, delete).
    pub const fn changes_state(&self) -> bool {
        self.facts().changes_state
    }

    /// Whether it may be kept to leave at a `send_at` ahead.
    pub const fn schedulable(&self) -> bool {
        self.facts().schedulable
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_rpc_of_the_operation_services_is_a_kind_and_batch_is_not() {
        use crate::core::rpcs::{account_service, messaging_service, template_service};
        let kinds: BTreeSet<&str> = OpKind::ALL.iter().map(|k| k.facts().rpc).collect();
        assert_eq!(kinds.len(), OpKind::ALL.len(), "two kinds share an RPC");
        let mut rpcs: BTreeSet<&str> = crate::core::rpcs::ALL.iter().copied().collect();
        rpcs.retain(|rpc| {
            [
                messaging_service::ALL,
                account_service::ALL,
                template_service::ALL,
            ]
            .iter()
            .any(|service| service.contains(rpc))
        });
        // Not gateway operations: several operations, and msgw's own answers.
        for own in [
            messaging_service::BATCH,
            messaging_service::CANCEL_MESSAGE,
            messaging_service::ESTIMATE_SMS,
            messaging_service::LOOKUP_NUMBER,
        ] {
            rpcs.remove(own);
        }
        assert_eq!(kinds, rpcs);
    }

    #[test]
    fn facts_agree_with_one_another() {
        for kind in OpKind::ALL {
            let f = kind.facts();
            let keyed = f.idempotency != Idempotency::None;
            // Money is spent only under a key: every send is keyed and changes state.
            assert_eq!(keyed, f.permission == Permission::Send, "{kind:?}");
            assert!(
                !keyed || f.changes_state,
                "{kind:?}: keyed but changes nothing"
            );
            assert!(!f.tracked || keyed, "{kind:?}: tracked without a key");
            assert!(
                !f.hook || f.tracked,
                "{kind:?}: a hook on an untracked operation"
            );
            // A kept request leaves once: only under the key its claim arbitrates.
            assert!(
                !f.schedulable || f.idempotency == Idempotency::ClientId,
                "{kind:?}: schedulable without a replayable key"
            );
        }
    }
}
