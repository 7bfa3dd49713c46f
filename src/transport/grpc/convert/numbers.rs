//! What msgw knows of a number (LookupNumber), as proto.

use crate::core::domain::NumberType;
use crate::core::verify::numbers::{Codes, Judged};
use crate::transport::proto;

/// A number's type as proto.
fn number_type(t: NumberType) -> proto::NumberType {
    use proto::NumberType as P;
    match t {
        NumberType::Mobile => P::Mobile,
        NumberType::FixedLine => P::FixedLine,
        NumberType::FixedLineOrMobile => P::FixedLineOrMobile,
        NumberType::TollFree => P::TollFree,
        NumberType::PremiumRate => P::PremiumRate,
        NumberType::SharedCost => P::SharedCost,
        NumberType::Voip => P::Voip,
        NumberType::PersonalNumber => P::PersonalNumber,
        NumberType::Pager => P::Pager,
        NumberType::Uan => P::Uan,
        NumberType::Voicemail => P::Voicemail,
        NumberType::Unknown => P::Unknown,
    }
}

/// LookupNumber's answer.
pub fn looked_up(judged: Judged) -> proto::LookupNumberResponse {
    let info = judged.info;
    proto::LookupNumberResponse {
        phone: info.phone.get().to_string(),
        e164: info.e164(),
        valid: info.valid,
        calling_code: info.calling_code.map_or(0, u32::from),
        region: info.region.unwrap_or_default(),
        number_type: number_type(info.number_type).into(),
        verification_codes: match judged.codes {
            Codes::Allowed => proto::VerificationCodes::Allowed,
            Codes::VoiceOnly => proto::VerificationCodes::VoiceOnly,
            Codes::Refused => proto::VerificationCodes::Refused,
        }
        .into(),
        type_check_exempt: judged.exempt,
    }
}
