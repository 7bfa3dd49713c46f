//! msgw's own model of the gateway's operations: validated values, operations,
//! their outputs and errors. Depends on neither the proto types nor the
//! gateway's JSON shapes.

mod caller;
mod cursor;
mod error;
mod events;
mod facts;
mod log;
mod money;
mod number_type;
mod ops;
mod outputs;
mod permission;
mod priority;
mod rate;
mod sms_parts;
mod status;
mod suppression;
mod values;
mod verification;

pub use caller::CallerName;
pub use cursor::Cursor;
pub use error::{Error, FieldViolation, Scope, UnavailableCause, Violations};
pub use events::{
    DeliveryReport, EventSource, MAX_DURATION_SECS, NewEvent, StatusEvent, received_now,
    representable,
};
pub use facts::{Facts, Idempotency, OpKind};
pub use log::LogEvent;
pub use money::{Money, MoneyError};
pub use number_type::NumberType;
pub use ops::{
    CAROUSEL_SLIDES, Gender, Operation, PipelineSend, PipelineStep, RcsFallback, RcsSend,
    Recipient, Slide, SmsFallback, SmsSend, TelegramOtp, TemplateSelector, ViberContent, ViberKind,
    ViberSend, ViberStage, Voice, VoiceSend,
};
pub use outputs::{
    AnswerSource, Balance, HlrReport, Media, Network, Output, Reply, SendReceipt, Sender,
    SmsTemplate, StatusReport, ViberTemplate, VoiceOtpCall, Waited,
};
pub use permission::Permission;
pub use priority::Priority;
pub use rate::{Grant, RateLimit, RateWindow};
pub use sms_parts::{SmsEncoding, SmsEstimate, estimate as estimate_sms};
pub use status::{Channel, ReportedStatus, Status};
pub use suppression::{
    KeywordReply, Keywords, MAX_REASON_CHARS, Reason, Suppression, SuppressionChange,
    SuppressionEvent, SuppressionSource,
};
pub use values::{ClientId, HttpUrl, Lifetime, OtpCode, Phone, Text, TextKind, ValueError};
pub use verification::VerificationStatus;
