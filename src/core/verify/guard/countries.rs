//! Country calling codes (ITU-T E.164 assigned codes, 1 to 3 digits): the key of a
//! country budget and the label of conversion by country. The codes are prefix-free
//! (no code begins another), so a number's code is the one of its first 1, 2 or 3
//! digits that is in the table.

/// Every assigned country calling code, and the codes of international networks
/// (satellite, freephone, premium rate), which pumping favours.
const CODES: &[&str] = &[
    "1", "7", //
    "20", "27", "30", "31", "32", "33", "34", "36", "39", "40", "41", "43", "44", "45", "46", "47",
    "48", "49", "51", "52", "53", "54", "55", "56", "57", "58", "60", "61", "62", "63", "64", "65",
    "66", "81", "82", "84", "86", "90", "91", "92", "93", "94", "95", "98", //
    "211", "212", "213", "216", "218", "220", "221", "222", "223", "224", "225", "226", "227",
    "228", "229", "230", "231", "232", "233", "234", "235", "236", "237", "238", "239", "240",
    "241", "242", "243", "244", "245", "246", "247", "248", "249", "250", "251", "252", "253",
    "254", "255", "256", "257", "258", "260", "261", "262", "263", "264", "265", "266", "267",
    "268", "269", "290", "291", "297", "298", "299", //
    "350", "351", "352", "353", "354", "355", "356", "357", "358", "359", "370", "371", "372",
    "373", "374", "375", "376", "377", "378", "379", "380", "381", "382", "383", "385", "386",
    "387", "389", "420", "421", "423", //
    "500", "501", "502", "503", "504", "505", "506", "507", "508", "509", "590", "591", "592",
    "593", "594", "595", "596", "597", "598", "599", //
    "670", "672", "673", "674", "675", "676", "677", "678", "679", "680", "681", "682", "683",
    "685", "686", "687", "688", "689", "690", "691", "692", //
    "800", "808", "850", "852", "853", "855", "856", "870", "878", "880", "881", "882", "883",
    "886", "888", //
    "960", "961", "962", "963", "964", "965", "966", "967", "968", "970", "971", "972", "973",
    "974", "975", "976", "977", "979", "992", "993", "994", "995", "996", "998",
];

/// The label of a number whose first digits are no assigned calling code.
pub const UNASSIGNED: &str = "unassigned";

/// The calling code `digits` (a number, or a prefix of one) begins with, if any.
pub fn calling_code(digits: &str) -> Option<&'static str> {
    (1..=3.min(digits.len()))
        .filter_map(|n| digits.get(..n))
        .find_map(|prefix| CODES.iter().copied().find(|code| *code == prefix))
}

/// Whether `code` is an assigned calling code.
pub fn is_calling_code(code: &str) -> bool {
    CODES.contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_prefix_free() {
        for a in CODES {
            for b in CODES {
                assert!(a == b || !b.starts_with(a), "{a} begins {b}");
            }
        }
    }

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
