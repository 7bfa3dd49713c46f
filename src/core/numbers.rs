//! Number intelligence from Google libphonenumber's metadata (the `phonenumber` crate):
//! whether a number exists in its calling code's numbering plan, its calling code and
//! region, and its type (mobile, fixed line, premium rate, ...). Nothing is asked of
//! the gateway: the metadata is compiled into msgw and loaded once.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use phonenumber::metadata::{DATABASE, Descriptor, Metadata};

pub use super::domain::NumberType;
use super::domain::Phone;

/// The type of libphonenumber's `kind`.
fn type_of(kind: phonenumber::Type) -> NumberType {
    use phonenumber::Type as T;
    match kind {
        T::Mobile => NumberType::Mobile,
        T::FixedLine => NumberType::FixedLine,
        T::FixedLineOrMobile => NumberType::FixedLineOrMobile,
        T::TollFree => NumberType::TollFree,
        T::PremiumRate => NumberType::PremiumRate,
        T::SharedCost => NumberType::SharedCost,
        T::Voip => NumberType::Voip,
        T::PersonalNumber => NumberType::PersonalNumber,
        T::Pager => NumberType::Pager,
        T::Uan => NumberType::Uan,
        T::Voicemail => NumberType::Voicemail,
        // Short-number types: a full international number is never one of them.
        T::Emergency
        | T::ShortCode
        | T::StandardRate
        | T::Carrier
        | T::NoInternational
        | T::Unknown => NumberType::Unknown,
    }
}

/// What the metadata says of one number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberInfo {
    /// The number.
    pub phone: Phone,
    /// Its calling code's plan has such a number (its type is known).
    pub valid: bool,
    /// Its calling code (1 to 3 digits), if an assigned code begins it.
    pub calling_code: Option<u16>,
    /// Its region: ISO 3166-1 alpha-2 (`UA`), or `001` for a non-geographic code
    /// (satellite, international networks); `None` when the plan cannot tell.
    pub region: Option<String>,
    /// Its type.
    pub number_type: NumberType,
}

impl NumberInfo {
    /// The number in E.164 form: `+` and its digits.
    pub fn e164(&self) -> String {
        format!("+{}", self.phone.get())
    }
}

/// Calling codes of the metadata, each with its digits as text (the labels metrics
/// and budgets use, kept for the life of the process).
static CODES: LazyLock<HashMap<u16, String>> = LazyLock::new(|| {
    (1..=999u16)
        .filter(|code| DATABASE.region(code).is_some())
        .map(|code| (code, code.to_string()))
        .collect()
});

/// Calling codes shared by several regions (`1`: US, CA, JM, ...; `44`: GB, JE, ...).
static SHARED: LazyLock<HashSet<u16>> = LazyLock::new(|| {
    CODES
        .keys()
        .copied()
        .filter(|code| DATABASE.region(code).is_some_and(|r| r.len() > 1))
        .collect()
});

/// The region of `phone` as the fraud guard judges it, when its calling code is shared
/// by several regions and the metadata tells which one it is in: the calling code, `/`
/// and the region's code (`1/JM`, `1/US`, `44/JE`). `None` for a calling code of one
/// region (the calling code is the region) and for a number no region's plan claims.
pub fn shared_region(phone: Phone) -> Option<String> {
    let digits = phone.get().to_string();
    let code: u16 = calling_code_of(&digits)?.parse().ok()?;
    if !SHARED.contains(&code) {
        return None;
    }
    let region = lookup(phone).region?;
    Some(format!("{code}/{region}"))
}

/// Loads the metadata now (about ten milliseconds), so the first number looked up
/// does not wait for it.
pub fn load() -> usize {
    CODES.len()
}

/// The calling code the digits `digits` (a number, or a prefix of one) begin with, if
/// any, as text. Calling codes are prefix-free (ITU-T E.164): at most one of the first
/// one, two and three digits is one.
pub fn calling_code_of(digits: &str) -> Option<&'static str> {
    (1..=3.min(digits.len()))
        .filter_map(|n| digits.get(..n)?.parse::<u16>().ok())
        .find_map(|code| CODES.get(&code).map(String::as_str))
}

/// Whether `code` (digits) is a calling code of the metadata.
pub fn is_calling_code(code: &str) -> bool {
    !code.starts_with('0') && code.parse::<u16>().is_ok_and(|c| CODES.contains_key(&c))
}

/// What the metadata says of `phone`.
pub fn lookup(phone: Phone) -> NumberInfo {
    let digits = phone.get().to_string();
    let Some(code) = calling_code_of(&digits) else {
        return NumberInfo {
            phone,
            valid: false,
            calling_code: None,
            region: None,
            number_type: NumberType::Unknown,
        };
    };
    let calling_code = code.parse().ok();
    // The number as the gateway gets it: every digit after the calling code is its
    // national significant number, leading zeros included (the plans of Italy, Côte
    // d'Ivoire, Benin, Congo, ... keep a 0 that is part of the number). Else, as
    // libphonenumber reads it: after a national prefix written after the calling code
    // (`+44 0 20...`), if there is one.
    let national = digits.get(code.len()..).unwrap_or_default();
    let typed = calling_code
        .and_then(|code| typed(code, national))
        .or_else(|| {
            let parsed = phonenumber::parse(None, format!("+{digits}")).ok()?;
            typed(parsed.code().value(), &parsed.national().to_string())
        });
    let (region, number_type) = match typed {
        Some((plan, number_type)) => (Some(plan.id().to_owned()), number_type),
        // No such number: its region still, where the plan tells it.
        None => (
            calling_code
                .and_then(|code| plan_of(code, national))
                .map(|plan| plan.id().to_owned()),
            NumberType::Unknown,
        ),
    };
    NumberInfo {
        phone,
        valid: number_type != NumberType::Unknown,
        calling_code,
        region,
        number_type,
    }
}

/// The plan and type of the national significant number `national` of calling code
/// `code`, when its plan has such a number. libphonenumber's metadata, not the
/// `phonenumber` crate's `PhoneNumber::number_type`: that one matches the number
/// without its leading zeros, and the crate's parser takes a national prefix off
/// numbers that begin with it (Russia's `8 800...` toll-free numbers).
fn typed(code: u16, national: &str) -> Option<(&'static Metadata, NumberType)> {
    let plan = plan_of(code, national)?;
    let number_type = type_of(type_in(plan, national));
    (number_type != NumberType::Unknown).then_some((plan, number_type))
}

/// The numbering plan of calling code `code` that the national significant number
/// `national` belongs to, as libphonenumber chooses it: the only one of its code,
/// else the first (the main country first) whose leading digits begin the number or,
/// without leading digits, that gives the number a type.
fn plan_of(code: u16, national: &str) -> Option<&'static Metadata> {
    let plans = DATABASE.by_code(&code)?;
    if let [only] = plans[..] {
        return Some(only);
    }
    plans.into_iter().find(|plan| match plan.leading_digits() {
        Some(leading) => leading.find(national).is_some_and(|m| m.start() == 0),
        None => type_in(plan, national) != phonenumber::Type::Unknown,
    })
}

/// The type of the national significant number `national` in `plan`, as
/// libphonenumber's `getNumberType` tells it: the first special type whose pattern it
/// matches, else fixed line, mobile, or either where the two overlap.
fn type_in(plan: &Metadata, national: &str) -> phonenumber::Type {
    use phonenumber::Type as T;
    let d = plan.descriptors();
    let matches = |desc: Option<&Descriptor>| desc.is_some_and(|desc| desc.is_match(national));
    if !d.general().is_match(national) {
        return T::Unknown;
    }
    let special = [
        (T::PremiumRate, d.premium_rate()),
        (T::TollFree, d.toll_free()),
        (T::SharedCost, d.shared_cost()),
        (T::Voip, d.voip()),
        (T::PersonalNumber, d.personal_number()),
        (T::Pager, d.pager()),
        (T::Uan, d.uan()),
        (T::Voicemail, d.voicemail()),
    ];
    if let Some((kind, _)) = special.into_iter().find(|(_, desc)| matches(*desc)) {
        return kind;
    }
    let mobile = matches(d.mobile());
    if matches(d.fixed_line()) {
        let same = d.fixed_line().map(|f| f.national_number().as_str())
            == d.mobile().map(|m| m.national_number().as_str());
        return if same || mobile {
            T::FixedLineOrMobile
        } else {
            T::FixedLine
        };
    }
    if mobile { T::Mobile } else { T::Unknown }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(digits: &str) -> NumberInfo {
        lookup(Phone::parse(digits).expect("a number"))
    }

    #[test]
    fn tells_the_type_of_the_issues_numbers() {
        let premium = info("+449012345678");
        assert_eq!(premium.number_type, NumberType::PremiumRate);
        assert!(premium.valid);
        assert_eq!(premium.region.as_deref(), Some("GB"));
        for invalid in ["+870123456789", "+882012345678", "+380000000001"] {
            let i = info(invalid);
            assert_eq!(
                (i.valid, i.number_type),
                (false, NumberType::Unknown),
                "{invalid}"
            );
        }
        let mobile = info("+380971234567");
        assert_eq!(
            (mobile.valid, mobile.number_type, mobile.calling_code),
            (true, NumberType::Mobile, Some(380))
        );
        assert_eq!(mobile.region.as_deref(), Some("UA"));
        assert_eq!(mobile.e164(), "+380971234567");
        assert_eq!(info("+442079000001").number_type, NumberType::FixedLine);
        assert_eq!(info("+14155550100").calling_code, Some(1));
    }

    #[test]
    fn numbers_that_begin_with_0_or_a_national_prefix_get_their_type() {
        for (number, region, kind) in [
            ("+2250701234567", "CI", NumberType::Mobile),
            ("+2250501234567", "CI", NumberType::Mobile),
            ("+2290195123456", "BJ", NumberType::Mobile),
            ("+242061234567", "CG", NumberType::Mobile),
            ("+390612345678", "IT", NumberType::FixedLine),
            // Numbers that begin with their plan's national prefix (8).
            ("+78001234567", "RU", NumberType::TollFree),
            ("+37080123456", "LT", NumberType::Voip),
            // A national prefix written after the calling code, as libphonenumber
            // reads it.
            ("+4402079000001", "GB", NumberType::FixedLine),
        ] {
            let i = info(number);
            assert_eq!(
                (i.valid, i.number_type, i.region.as_deref()),
                (true, kind, Some(region)),
                "{number}"
            );
        }
    }

    /// Example numbers msgw cannot take at all: shorter than a number msgw accepts
    /// (`Phone::MIN_DIGITS`, 7 digits with the calling code). Iran's 4-digit UAN.
    const TOO_SHORT: [&str; 1] = ["+989601"];

    /// Every example number of libphonenumber's metadata, of every region and
    /// non-geographic code, is typed as the type it is the example of.
    #[test]
    fn every_example_number_of_the_metadata_gets_its_type() {
        use phonenumber::Type as T;
        let mut checked = 0;
        let mut wrong = Vec::new();
        for code in CODES.keys() {
            for plan in DATABASE.by_code(code).unwrap_or_default() {
                let d = plan.descriptors();
                for (kind, descriptor) in [
                    (T::FixedLine, d.fixed_line()),
                    (T::Mobile, d.mobile()),
                    (T::TollFree, d.toll_free()),
                    (T::PremiumRate, d.premium_rate()),
                    (T::SharedCost, d.shared_cost()),
                    (T::Voip, d.voip()),
                    (T::PersonalNumber, d.personal_number()),
                    (T::Pager, d.pager()),
                    (T::Uan, d.uan()),
                    (T::Voicemail, d.voicemail()),
                ] {
                    let Some(example) = descriptor.and_then(|d| d.example()) else {
                        continue;
                    };
                    let number = format!("+{code}{example}");
                    if TOO_SHORT.contains(&number.as_str()) {
                        continue;
                    }
                    let expected = type_of(kind);
                    let got = Phone::parse(&number).map(lookup);
                    checked += 1;
                    let right = got.as_ref().is_ok_and(|i| {
                        i.valid
                            && (i.number_type == expected
                                // Where the plan's fixed-line and mobile ranges
                                // overlap, libphonenumber says "either".
                                || (i.number_type == NumberType::FixedLineOrMobile
                                    && matches!(kind, T::FixedLine | T::Mobile)))
                    });
                    if !right {
                        wrong.push(format!(
                            "{} {number} ({kind:?}): {:?}",
                            plan.id(),
                            got.map(|i| i.number_type)
                        ));
                    }
                }
            }
        }
        assert!(checked > 1_000, "{checked} examples");
        assert!(
            wrong.is_empty(),
            "{} of {checked} examples mistyped:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn finds_codes_of_every_length_and_none_for_unassigned_ones() {
        assert_eq!(calling_code_of("14155550100"), Some("1"));
        assert_eq!(calling_code_of("79161234567"), Some("7"));
        assert_eq!(calling_code_of("447700900123"), Some("44"));
        assert_eq!(calling_code_of("380501234567"), Some("380"));
        assert_eq!(calling_code_of("881234000001"), Some("881"));
        assert_eq!(calling_code_of("2891234567"), None);
        assert_eq!(calling_code_of(""), None);
        assert!(is_calling_code("380") && is_calling_code("1"));
        assert!(!is_calling_code("28") && !is_calling_code("0380") && !is_calling_code(""));
        let unassigned = info("+2891234567");
        assert_eq!((unassigned.calling_code, unassigned.region), (None, None));
    }

    #[test]
    fn names_the_region_of_a_shared_calling_code_only() {
        let region = |digits: &str| shared_region(Phone::parse(digits).expect("a number"));
        assert_eq!(region("+18762101234").as_deref(), Some("1/JM"));
        assert_eq!(region("+12012345678").as_deref(), Some("1/US"));
        assert_eq!(region("+380971234567"), None);
        assert_eq!(region("+37122123456"), None);
    }

    #[test]
    fn codes_are_prefix_free() {
        for a in CODES.values() {
            for b in CODES.values() {
                assert!(a == b || !b.starts_with(a.as_str()), "{a} begins {b}");
            }
        }
    }

    #[test]
    fn type_names_read_back() {
        for t in NumberType::ALL {
            assert_eq!(NumberType::from_name(t.as_str()), Some(t));
        }
        assert_eq!(NumberType::from_name("invalid"), Some(NumberType::Unknown));
        assert_eq!(NumberType::from_name("landline"), None);
    }
}
