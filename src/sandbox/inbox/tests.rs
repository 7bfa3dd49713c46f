//! The code a message carries, and the endings a button may ask for.

use super::*;

fn sms(text: &str) -> Piece {
    Piece {
        channel: Channel::Sms,
        sender: Some("msgw".into()),
        text: Some(text.into()),
        extras: Vec::new(),
    }
}

#[test]
fn a_code_is_a_run_of_four_to_eight_digits_standing_alone() {
    for (text, code) in [
        ("Your verification code is 482910", Some("482910")),
        ("482910 is your code", Some("482910")),
        ("Code: 0471.", Some("0471")),
        ("Order 12 shipped", None),
        ("Your order 1042 has shipped", None),
        ("Shipping 20451 today", None),
        ("Ваш код: 5521", Some("5521")),
        ("Call +380971234567 for your code", None),
        ("Code ref ABC12345", None),
        ("123456789 is too long a code", None),
    ] {
        assert_eq!(code_in(&[sms(text)]).as_deref(), code, "{text}");
    }
    let telegram = Piece {
        channel: Channel::Telegram,
        sender: None,
        text: Some("0042".into()),
        extras: Vec::new(),
    };
    assert_eq!(code_in(&[telegram]).as_deref(), Some("0042"));
}

#[test]
fn endings_are_the_four_buttons_and_nothing_else() {
    assert_eq!(Ending::parse("DELIVERED", None), Some(Ending::Delivered));
    assert_eq!(
        Ending::parse("UNDELIVERABLE", Some("x")),
        Some(Ending::Undeliverable)
    );
    assert_eq!(Ending::parse("EXPIRED", None), Some(Ending::Expired));
    assert_eq!(
        Ending::parse("REPLIED", Some(" STOP ")),
        Some(Ending::Reply("STOP".into()))
    );
    assert_eq!(
        Ending::parse("", Some("yes")),
        Some(Ending::Reply("yes".into()))
    );
    assert_eq!(Ending::parse("REPLIED", Some("  ")), None);
    assert_eq!(Ending::parse("READ", None), None);
}
