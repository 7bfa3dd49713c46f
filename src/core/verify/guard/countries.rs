//! Country calling codes (ITU-T E.164, 1 to 3 digits): the key of a country budget and
//! the label of conversion by country. The codes are libphonenumber's
//! ([`crate::core::numbers`]), not a table of msgw's own; they are prefix-free (no code
//! begins another), so a number's code is the one of its first 1, 2 or 3 digits that
//! the metadata knows.

use crate::core::numbers;

/// The label of a number whose first digits are no assigned calling code.
pub const UNASSIGNED: &str = "unassigned";

/// The calling code `digits` (a number, or a prefix of one) begins with, if any.
pub fn calling_code(digits: &str) -> Option<&'static str> {
    numbers::calling_code_of(digits)
}

/// Whether `code` is an assigned calling code.
pub fn is_calling_code(code: &str) -> bool {
    numbers::is_calling_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_codes_of_every_length() {
        assert_eq!(calling_code("14155550100"), Some("1"));
        assert_eq!(calling_code("79161234567"), Some("7"));
        assert_eq!(calling_code("447700900123"), Some("44"));
        assert_eq!(calling_code("380501234567"), Some("380"));
        assert_eq!(calling_code("881234000001"), Some("881"));
        assert_eq!(calling_code("2125550100"), Some("212"));
    }

    #[test]
    fn unassigned_prefixes_have_no_code() {
        assert_eq!(calling_code("2891234567"), None);
        assert_eq!(calling_code("8391234567"), None);
        assert_eq!(calling_code(""), None);
        assert!(!is_calling_code("28"));
        assert!(is_calling_code("380"));
    }
}
