//! How many parts an SMS text takes, as the handset and the network count them: the
//! GSM 03.38 7-bit alphabet when every character is in it (160 septets in one part,
//! 153 a part when split, the extension table's characters taking two), else UCS-2
//! (70 UTF-16 code units in one part, 67 a part when split). A character is never
//! split between two parts: neither an extension character's escape nor a surrogate pair.

/// The GSM 03.38 default alphabet: one septet each.
const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";

/// The GSM 03.38 extension table: an escape and the character, two septets each.
const GSM7_EXTENDED: &str = "\x0c^{}\\[~]|€";

/// The encoding an SMS text is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmsEncoding {
    /// The GSM 03.38 7-bit alphabet.
    Gsm7,
    /// UCS-2 (UTF-16 on the wire).
    Ucs2,
}

impl SmsEncoding {
    /// Units in a message of one part, and in each part of a longer one (the rest of a
    /// part carries the header that joins the parts).
    const fn part_sizes(self) -> (u32, u32) {
        match self {
            Self::Gsm7 => (160, 153),
            Self::Ucs2 => (70, 67),
        }
    }
}

/// What a text costs as an SMS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmsEstimate {
    /// The encoding it is sent in.
    pub encoding: SmsEncoding,
    /// Its length in the encoding's units: septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: u32,
    /// The parts it is sent as (each charged as one SMS).
    pub parts: u32,
    /// The characters outside the GSM-7 alphabet, each once, in order of appearance:
    /// what to replace to send it in GSM-7.
    pub ucs2_chars: Vec<char>,
}

/// Septets of each ASCII character in GSM-7 (0: not in the alphabet): most texts are
/// ASCII, and a table look-up keeps counting them cheap on the send path.
const ASCII_SEPTETS: [u8; 128] = {
    let mut table = [0u8; 128];
    let (basic, extended) = (GSM7_BASIC.as_bytes(), GSM7_EXTENDED.as_bytes());
    let mut i = 0;
    while i < basic.len() {
        if basic[i] < 128 {
            table[basic[i] as usize] = 1;
        }
        i += 1;
    }
    i = 0;
    while i < extended.len() {
        if extended[i] < 128 {
            table[extended[i] as usize] = 2;
        }
        i += 1;
    }
    table
};

/// Septets of `c` in GSM-7, `None` when it is not in the alphabet.
fn septets(c: char) -> Option<u32> {
    if c.is_ascii() {
        return match ASCII_SEPTETS[c as usize] {
            0 => None,
            n => Some(u32::from(n)),
        };
    }
    if GSM7_BASIC.contains(c) {
        Some(1)
    } else if GSM7_EXTENDED.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// The parts and units of `text` in `encoding`, given each character's units.
fn count(text: &str, encoding: SmsEncoding, units_of: impl Fn(char) -> u32) -> (u32, u32) {
    let (single, each) = encoding.part_sizes();
    let total: u32 = text.chars().map(&units_of).sum();
    if total <= single {
        return (total, 1);
    }
    let (mut parts, mut filled) = (1u32, 0u32);
    for c in text.chars() {
        let units = units_of(c);
        if filled + units > each {
            parts += 1;
            filled = 0;
        }
        filled += units;
    }
    (total, parts)
}

/// The encoding, length and parts of `text` as an SMS.
pub fn estimate(text: &str) -> SmsEstimate {
    let mut ucs2_chars: Vec<char> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in text.chars() {
        if septets(c).is_none() && seen.insert(c) {
            ucs2_chars.push(c);
        }
    }
    let (encoding, (units, parts)) = if ucs2_chars.is_empty() {
        let gsm = SmsEncoding::Gsm7;
        (gsm, count(text, gsm, |c| septets(c).unwrap_or(1)))
    } else {
        let ucs2 = SmsEncoding::Ucs2;
        (ucs2, count(text, ucs2, |c| c.len_utf16() as u32))
    };
    SmsEstimate {
        encoding,
        units,
        parts,
        ucs2_chars,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> (SmsEncoding, u32, u32) {
        let e = estimate(text);
        (e.encoding, e.units, e.parts)
    }

    #[test]
    fn the_ascii_table_agrees_with_the_alphabet() {
        for b in 0u8..128 {
            let c = char::from(b);
            let expected = if GSM7_BASIC.contains(c) {
                Some(1)
            } else if GSM7_EXTENDED.contains(c) {
                Some(2)
            } else {
                None
            };
            assert_eq!(septets(c), expected, "{c:?}");
        }
        assert_eq!(septets('€'), Some(2));
        assert_eq!(septets('é'), Some(1));
        assert_eq!(septets('ж'), None);
    }

    #[test]
    fn gsm7_texts_take_160_septets_alone_and_153_a_part_when_split() {
        use SmsEncoding::Gsm7;
        let a = |n: usize| "a".repeat(n);
        assert_eq!(parts(&a(160)), (Gsm7, 160, 1));
        assert_eq!(parts(&a(161)), (Gsm7, 161, 2));
        assert_eq!(parts(&a(153 * 2)), (Gsm7, 306, 2));
        assert_eq!(parts(&a(307)), (Gsm7, 307, 3));
        assert_eq!(parts(""), (Gsm7, 0, 1));
    }

    #[test]
    fn extension_characters_take_two_septets_and_are_never_split() {
        use SmsEncoding::Gsm7;
        assert_eq!(parts("€"), (Gsm7, 2, 1));
        assert_eq!(parts(&format!("{}€", "a".repeat(158))), (Gsm7, 160, 1));
        assert_eq!(parts(&format!("{}€", "a".repeat(159))), (Gsm7, 161, 2));
        // 152 septets, then a two-septet € that does not fit the first part's 153.
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(10));
        assert_eq!(estimate(&text).parts, 2);
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(152));
        assert_eq!(parts(&text), (Gsm7, 306, 3), "the € starts the second part");
        assert!(estimate("{[~]}|^\\\u{c}").ucs2_chars.is_empty());
    }

    #[test]
    fn one_character_outside_gsm7_makes_the_text_ucs2_and_is_named() {
        use SmsEncoding::Ucs2;
        // A BMP emoji is one UTF-16 unit: 70 characters are one part, 71 are two.
        let text = |n: usize| format!("☺{}", "a".repeat(n - 1));
        assert_eq!(parts(&text(70)), (Ucs2, 70, 1));
        assert_eq!(parts(&text(71)), (Ucs2, 71, 2));
        assert_eq!(parts(&text(134)), (Ucs2, 134, 2));
        assert_eq!(parts(&text(135)), (Ucs2, 135, 3));
        let e = estimate("Привіт, ☺ і ще раз ☺");
        assert_eq!(e.encoding, Ucs2);
        assert_eq!(
            e.ucs2_chars,
            ['П', 'р', 'и', 'в', 'і', 'т', '☺', 'щ', 'е', 'а', 'з']
        );
    }

    #[test]
    fn an_emoji_outside_the_bmp_takes_two_units_and_is_never_split() {
        use SmsEncoding::Ucs2;
        // 😀 is a surrogate pair: 68 letters and one emoji are 70 units, one part.
        assert_eq!(parts(&format!("😀{}", "a".repeat(68))), (Ucs2, 70, 1));
        assert_eq!(parts(&format!("😀{}", "a".repeat(69))), (Ucs2, 71, 2));
        // 66 units, then a pair that does not fit the first part's 67.
        let text = format!("{}😀{}", "a".repeat(66), "a".repeat(66));
        assert_eq!(
            parts(&text),
            (Ucs2, 134, 3),
            "the pair starts the second part"
        );
    }
}
