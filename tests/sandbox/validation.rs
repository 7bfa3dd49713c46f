//! Every validation rule of docs/gateway.md#validation-rules, one named case each.

use crate::common::*;
use serde_json::{Value, json};

const PHONE: u64 = 380971234567;

fn set(base: &Value, pairs: &[(&str, Value)]) -> Value {
    let mut out = base.clone();
    for (path, value) in pairs {
        *pointer(&mut out, path) = value.clone();
    }
    out
}

fn unset(base: &Value, path: &str) -> Value {
    let mut out = base.clone();
    let (parent, key) = path.rsplit_once('/').unwrap_or(("", path));
    let parent = if parent.is_empty() {
        &mut out
    } else {
        pointer(&mut out, parent)
    };
    parent.as_object_mut().unwrap().remove(key);
    out
}

/// `a/b` addresses `value["a"]["b"]`, creating objects on the way.
fn pointer<'a>(value: &'a mut Value, path: &str) -> &'a mut Value {
    path.split('/')
        .fold(value, |v, key| match key.parse::<usize>() {
            Ok(i) if v.is_array() => &mut v[i],
            _ => &mut v[key],
        })
}

fn slide() -> Value {
    json!({"caption": "c", "image": "https://e.org/i.png", "url": "https://e.org", "button": "Go"})
}

fn sms_op() -> Value {
    json!({"type": "sms", "id": 1, "phone": PHONE, "sms_message": "m", "sms_signature": "msgw"})
}

fn viber_op(viber_type: &str) -> Value {
    let mut op = json!({"type": "viber", "id": 1, "phone": PHONE, "viber_signature": "msgw", "viber_type": viber_type,
        "viber_message": "m", "viber_image": "https://e.org/i.png", "viber_link": "https://e.org", "viber_button": "Go"});
    if viber_type == "carousel" {
        op["viber_carousel"] = json!([slide(), slide()]);
    }
    op
}

fn rcs_op(kind: &str) -> Value {
    json!({"type": kind, "id": 1, "phone": PHONE, "rcs_message": "m", "rcs_signature": "msgw",
        "rcs_image": "https://e.org/i.png", "rcs_button": "Go", "rcs_link": "https://e.org",
        "sms_message": "s", "sms_signature": "msgw", "viber_signature": "msgw", "viber_type": "text", "viber_message": "v"})
}

fn telegram_op() -> Value {
    json!({"type": "telegram", "id": 1, "phone": PHONE, "message": "1234"})
}

fn voice_op() -> Value {
    json!({"type": "voice", "id": 1, "phone": PHONE, "message": "m",
        "voice": {"gender": "female", "language": "uk-UA", "name": "uk-UA-Standard-A"}, "dtmf": true})
}

fn pipeline_op() -> Value {
    json!({"type": "pipeline", "id": 1, "phone": PHONE, "pipeline": ["voice", "telegram", "viber", "rcs", "sms", "whatsapp"],
        "voice": {"gender": "male", "language": "uk-UA", "name": "n"}, "telegram": {"message": "123456"},
        "viber": {"message": "m", "signature": "msgw", "type": "text"}, "rcs": {"message": "m", "signature": "msgw"},
        "sms": {"message": "m", "signature": "msgw"}, "whatsapp": {"message": "m", "signature": "msgw"}})
}

#[rustfmt::skip]
fn rejected_cases() -> Vec<(&'static str, Value, &'static str)> {
    let sms = sms_op();
    let carousel = viber_op("carousel");
    let vsms = set(
        &viber_op("text"),
        &[
            ("type", json!("viber+sms")),
            ("sms_message", json!("s")),
            ("sms_signature", json!("msgw")),
        ],
    );
    let rvs = rcs_op("rcs+viber+sms");
    let pipe = pipeline_op();
    vec![
        // id and phone, shared by every send
        ("id missing", unset(&sms, "id"), "Missing id"),
        ("id as string", set(&sms, &[("id", json!("1"))]), "Invalid id"),
        ("id zero", set(&sms, &[("id", json!(0))]), "Invalid id"),
        ("id negative", set(&sms, &[("id", json!(-1))]), "Invalid id"),
        ("id fractional", set(&sms, &[("id", json!(1.5))]), "Invalid id"),
        ("phone missing", unset(&sms, "phone"), "Missing phone"),
        ("phone as string", set(&sms, &[("phone", json!("380971234567"))]), "Invalid phone"),
        ("phone with six digits", set(&sms, &[("phone", json!(123456))]), "Invalid phone"),
        ("phone with sixteen digits", set(&sms, &[("phone", json!(1234567890123456_u64))]), "Invalid phone"),
        ("phone zero", set(&sms, &[("phone", json!(0))]), "Invalid phone"),
        ("phone negative", set(&sms, &[("phone", json!(-380971234567_i64))]), "Invalid phone"),
        // sms
        ("sms_message missing", unset(&sms, "sms_message"), "Missing sms_message"),
        ("sms_message empty", set(&sms, &[("sms_message", json!(""))]), "Missing sms_message"),
        ("sms_message number", set(&sms, &[("sms_message", json!(5))]), "Invalid sms_message"),
        ("sms_signature missing", unset(&sms, "sms_signature"), "Missing sms_signature"),
        ("sms_lifetime below 3600", set(&sms, &[("sms_lifetime", json!(3599))]), "Invalid sms_lifetime"),
        ("sms_lifetime above 259200", set(&sms, &[("sms_lifetime", json!(259201))]), "Invalid sms_lifetime"),
        ("sms_lifetime as string", set(&sms, &[("sms_lifetime", json!("3600"))]), "Invalid sms_lifetime"),
        ("short_link as string", set(&sms, &[("short_link", json!("true"))]), "Invalid short_link"),
        ("unsubscribe_link as number", set(&sms, &[("unsubscribe_link", json!(1))]), "Invalid unsubscribe_link"),
        ("hook not a url", set(&sms, &[("hook", json!("not a url"))]), "Invalid hook"),
        ("hook relative", set(&sms, &[("hook", json!("/webhook"))]), "Invalid hook"),
        ("hook ftp", set(&sms, &[("hook", json!("ftp://e.org/hook"))]), "Invalid hook"),
        ("hook number", set(&sms, &[("hook", json!(1))]), "Invalid hook"),
        // viber
        ("viber_signature missing", unset(&viber_op("text"), "viber_signature"), "Missing viber_signature"),
        ("viber_type missing", unset(&viber_op("text"), "viber_type"), "Missing viber_type"),
        ("viber_type unknown", viber_op("video"), "Invalid viber_type"),
        ("text needs viber_message", unset(&viber_op("text"), "viber_message"), "Missing viber_message"),
        ("image needs viber_image", unset(&viber_op("image"), "viber_image"), "Missing viber_image"),
        ("viber_image not a url", set(&viber_op("image"), &[("viber_image", json!("i.png"))]), "Invalid viber_image"),
        ("text+link needs viber_message", unset(&viber_op("text+link"), "viber_message"), "Missing viber_message"),
        ("text+link needs viber_link", unset(&viber_op("text+link"), "viber_link"), "Missing viber_link"),
        ("text+link needs viber_button", unset(&viber_op("text+link"), "viber_button"), "Missing viber_button"),
        ("text+image+link needs viber_message", unset(&viber_op("text+image+link"), "viber_message"), "Missing viber_message"),
        ("text+image+link needs viber_image", unset(&viber_op("text+image+link"), "viber_image"), "Missing viber_image"),
        ("text+image+link needs viber_link", unset(&viber_op("text+image+link"), "viber_link"), "Missing viber_link"),
        ("text+image+link needs viber_button", unset(&viber_op("text+image+link"), "viber_button"), "Missing viber_button"),
        ("viber_link not a url", set(&viber_op("text+link"), &[("viber_link", json!("e.org"))]), "Invalid viber_link"),
        ("viber_button number", set(&viber_op("text+link"), &[("viber_button", json!(1))]), "Invalid viber_button"),
        ("carousel needs viber_message", unset(&carousel, "viber_message"), "Missing viber_message"),
        ("carousel needs viber_carousel", unset(&carousel, "viber_carousel"), "Missing viber_carousel"),
        ("viber_carousel not an array", set(&carousel, &[("viber_carousel", slide())]), "Invalid viber_carousel"),
        ("viber_carousel with one slide", set(&carousel, &[("viber_carousel", json!([slide()]))]), "viber_carousel must have 2 to 5 slides"),
        ("viber_carousel with six slides", set(&carousel, &[("viber_carousel", json!(vec![slide(); 6]))]), "viber_carousel must have 2 to 5 slides"),
        ("viber_carousel slide not an object", set(&carousel, &[("viber_carousel/1", json!("slide"))]), "Invalid viber_carousel[1]"),
        ("slide needs caption", unset(&carousel, "viber_carousel/0/caption"), "Missing viber_carousel[0].caption"),
        ("slide needs image", unset(&carousel, "viber_carousel/1/image"), "Missing viber_carousel[1].image"),
        ("slide needs url", unset(&carousel, "viber_carousel/0/url"), "Missing viber_carousel[0].url"),
        ("slide needs button", unset(&carousel, "viber_carousel/0/button"), "Missing viber_carousel[0].button"),
        ("slide url not a url", set(&carousel, &[("viber_carousel/0/url", json!("nope"))]), "Invalid viber_carousel[0].url"),
        ("slide button2 without url2", set(&carousel, &[("viber_carousel/1/button2", json!("More"))]), "Missing viber_carousel[1].url2"),
        ("slide url2 without button2", set(&carousel, &[("viber_carousel/1/url2", json!("https://e.org/2"))]), "Missing viber_carousel[1].button2"),
        ("viber_lifetime below 60", set(&viber_op("text"), &[("viber_lifetime", json!(59))]), "Invalid viber_lifetime"),
        ("viber_lifetime as string", set(&viber_op("text"), &[("viber_lifetime", json!("60"))]), "Invalid viber_lifetime"),
        // viber+sms
        ("viber+sms needs sms_message", unset(&vsms, "sms_message"), "Missing sms_message"),
        ("viber+sms needs sms_signature", unset(&vsms, "sms_signature"), "Missing sms_signature"),
        ("viber+sms keeps the viber rules", unset(&vsms, "viber_message"), "Missing viber_message"),
        ("viber+sms checks sms_lifetime", set(&vsms, &[("sms_lifetime", json!(10))]), "Invalid sms_lifetime"),
        // rcs
        ("rcs needs rcs_message", unset(&rcs_op("rcs"), "rcs_message"), "Missing rcs_message"),
        ("rcs needs rcs_signature", unset(&rcs_op("rcs"), "rcs_signature"), "Missing rcs_signature"),
        ("rcs needs rcs_image", unset(&rcs_op("rcs"), "rcs_image"), "Missing rcs_image"),
        ("rcs needs rcs_button", unset(&rcs_op("rcs"), "rcs_button"), "Missing rcs_button"),
        ("rcs needs rcs_link", unset(&rcs_op("rcs"), "rcs_link"), "Missing rcs_link"),
        ("rcs_image not a url", set(&rcs_op("rcs"), &[("rcs_image", json!("x"))]), "Invalid rcs_image"),
        ("rcs_link not a url", set(&rcs_op("rcs"), &[("rcs_link", json!("mailto:a@e.org"))]), "Invalid rcs_link"),
        ("rcs_lifetime below 60", set(&rcs_op("rcs"), &[("rcs_lifetime", json!(59))]), "Invalid rcs_lifetime"),
        ("rcs+sms needs sms_message", unset(&rcs_op("rcs+sms"), "sms_message"), "Missing sms_message"),
        ("rcs+sms needs sms_signature", unset(&rcs_op("rcs+sms"), "sms_signature"), "Missing sms_signature"),
        ("rcs+sms keeps the rcs rules", unset(&rcs_op("rcs+sms"), "rcs_link"), "Missing rcs_link"),
        ("rcs+viber+sms needs viber_signature", unset(&rvs, "viber_signature"), "Missing viber_signature"),
        ("rcs+viber+sms needs viber_type", unset(&rvs, "viber_type"), "Missing viber_type"),
        ("rcs+viber+sms needs sms_message", unset(&rvs, "sms_message"), "Missing sms_message"),
        ("rcs+viber+sms needs the per-type field", set(&rvs, &[("viber_type", json!("image"))]), "Missing viber_image"),
        ("rcs+viber+sms checks the carousel", set(&rvs, &[("viber_type", json!("carousel")), ("viber_carousel", json!([slide()]))]), "viber_carousel must have 2 to 5 slides"),
        // telegram
        ("telegram needs message", unset(&telegram_op(), "message"), "Missing message"),
        ("telegram message of 3 digits", set(&telegram_op(), &[("message", json!("123"))]), "Invalid message"),
        ("telegram message of 9 digits", set(&telegram_op(), &[("message", json!("123456789"))]), "Invalid message"),
        ("telegram message with a letter", set(&telegram_op(), &[("message", json!("12a4"))]), "Invalid message"),
        ("telegram message as number", set(&telegram_op(), &[("message", json!(1234))]), "Invalid message"),
        ("telegram_lifetime below 60", set(&telegram_op(), &[("telegram_lifetime", json!(59))]), "Invalid telegram_lifetime"),
        // voice
        ("voice needs message", unset(&voice_op(), "message"), "Missing message"),
        ("voice needs voice", unset(&voice_op(), "voice"), "Missing voice"),
        ("voice not an object", set(&voice_op(), &[("voice", json!("female"))]), "Invalid voice"),
        ("voice needs gender", unset(&voice_op(), "voice/gender"), "Missing voice.gender"),
        ("voice gender unknown", set(&voice_op(), &[("voice/gender", json!("robot"))]), "Invalid voice.gender"),
        ("voice needs language", unset(&voice_op(), "voice/language"), "Missing voice.language"),
        ("voice needs name", unset(&voice_op(), "voice/name"), "Missing voice.name"),
        ("dtmf as string", set(&voice_op(), &[("dtmf", json!("yes"))]), "Invalid dtmf"),
        // call/otp, hlr, status
        ("call/otp needs phone", json!({"type": "call/otp", "id": 1}), "Missing phone"),
        ("call/otp needs id", json!({"type": "call/otp", "phone": PHONE}), "Missing id"),
        ("hlr needs id", json!({"type": "hlr", "phone": PHONE}), "Missing id"),
        ("hlr phone as string", json!({"type": "hlr", "id": 1, "phone": "380971234567"}), "Invalid phone"),
        ("status needs id", json!({"type": "status"}), "Missing id"),
        ("status id as string", json!({"type": "status", "id": "1"}), "Invalid id"),
        // pipeline
        ("pipeline needs id", unset(&pipe, "id"), "Missing id"),
        ("pipeline needs pipeline", unset(&pipe, "pipeline"), "Missing pipeline"),
        ("pipeline empty", set(&pipe, &[("pipeline", json!([]))]), "Invalid pipeline"),
        ("pipeline as string", set(&pipe, &[("pipeline", json!("sms"))]), "Invalid pipeline"),
        ("pipeline entry not a string", set(&pipe, &[("pipeline", json!([1]))]), "Invalid pipeline"),
        ("pipeline unknown channel", set(&pipe, &[("pipeline", json!(["sms", "fax"]))]), "Unknown pipeline channel: fax"),
        ("pipeline repeated channel", set(&pipe, &[("pipeline", json!(["sms", "viber", "sms"]))]), "Repeated pipeline channel: sms"),
        ("pipeline hook not a url", set(&pipe, &[("hook", json!("x"))]), "Invalid hook"),
        ("pipeline needs sms settings", unset(&pipe, "sms"), "Missing sms"),
        ("pipeline sms settings not an object", set(&pipe, &[("sms", json!("m"))]), "Invalid sms"),
        ("pipeline sms needs message", unset(&pipe, "sms/message"), "Missing sms.message"),
        ("pipeline sms needs signature", unset(&pipe, "sms/signature"), "Missing sms.signature"),
        ("pipeline needs telegram settings", unset(&pipe, "telegram"), "Missing telegram"),
        ("pipeline telegram needs message", unset(&pipe, "telegram/message"), "Missing telegram.message"),
        ("pipeline telegram message not an otp", set(&pipe, &[("telegram/message", json!("hello"))]), "Invalid telegram.message"),
        ("pipeline needs viber settings", unset(&pipe, "viber"), "Missing viber"),
        ("pipeline viber needs message", unset(&pipe, "viber/message"), "Missing viber.message"),
        ("pipeline viber needs signature", unset(&pipe, "viber/signature"), "Missing viber.signature"),
        ("pipeline viber needs type", unset(&pipe, "viber/type"), "Missing viber.type"),
        ("pipeline viber type unknown", set(&pipe, &[("viber/type", json!("video"))]), "Invalid viber.type"),
        ("pipeline needs voice settings", unset(&pipe, "voice"), "Missing voice"),
        ("pipeline voice gender unknown", set(&pipe, &[("voice/gender", json!("x"))]), "Invalid voice.gender"),
        ("pipeline voice needs language", unset(&pipe, "voice/language"), "Missing voice.language"),
        ("pipeline voice needs name", unset(&pipe, "voice/name"), "Missing voice.name"),
        ("pipeline needs rcs settings", unset(&pipe, "rcs"), "Missing rcs"),
        ("pipeline rcs needs signature", unset(&pipe, "rcs/signature"), "Missing rcs.signature"),
        ("pipeline rcs needs message", unset(&pipe, "rcs/message"), "Missing rcs.message"),
        ("pipeline needs whatsapp settings", unset(&pipe, "whatsapp"), "Missing whatsapp"),
        // templates
        ("template/create needs template", json!({"type": "template/create", "name": "n"}), "Missing template"),
        ("template/create template empty", json!({"type": "template/create", "template": ""}), "Missing template"),
        ("template/create template number", json!({"type": "template/create", "template": 5}), "Invalid template"),
        ("template/create name number", json!({"type": "template/create", "template": "t", "name": 5}), "Invalid name"),
        ("template/delete needs id or template", json!({"type": "template/delete"}), "Missing id or template"),
        ("template/delete id as number", json!({"type": "template/delete", "id": 1001}), "Invalid id"),
        ("template/viber/create needs template", json!({"type": "template/viber/create", "signature": "msgw"}), "Missing template"),
        ("template/viber/create signature number", json!({"type": "template/viber/create", "template": "t", "signature": 1}), "Invalid signature"),
        ("template/viber/delete needs id or template", json!({"type": "template/viber/delete"}), "Missing id or template"),
        ("template/viber/delete id as string", json!({"type": "template/viber/delete", "id": "1001"}), "Invalid id"),
        // magic number 1
        ("blocked number", set(&sms, &[("phone", json!(380000000001_u64))]), "Phone number is blocked"),
    ]
}

#[tokio::test]
async fn every_validation_rule_rejects_with_its_text() {
    let sb = spawn_sandbox(test_config()).await;
    let cases = rejected_cases();
    // One envelope for all: also proves each operation is judged on its own.
    let items = sb
        .ops(cases.iter().map(|(_, op, _)| op.clone()).collect())
        .await;
    assert_eq!(items.len(), cases.len());
    let mut failures = Vec::new();
    for ((name, op, error), item) in cases.iter().zip(&items) {
        let mut expected = json!({"success": false, "error": error});
        if let Some(id) = op.get("id") {
            expected["data"] = json!({"id": id});
        }
        if *item != expected {
            failures.push(format!("{name}: expected {expected}, got {item}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(sb.balance().await, 1000.0, "nothing rejected was billed");
}

#[tokio::test]
async fn boundary_values_are_accepted() {
    let sb = spawn_sandbox(test_config()).await;
    let cases = vec![
        (
            "sms_lifetime 3600",
            set(&sms_op(), &[("sms_lifetime", json!(3600))]),
        ),
        (
            "sms_lifetime 259200",
            set(&sms_op(), &[("sms_lifetime", json!(259200))]),
        ),
        (
            "phone of 7 digits",
            set(&sms_op(), &[("phone", json!(1234567))]),
        ),
        (
            "phone of 15 digits",
            set(&sms_op(), &[("phone", json!(123456789012345_u64))]),
        ),
        (
            "null optional fields",
            set(
                &sms_op(),
                &[("hook", Value::Null), ("sms_lifetime", Value::Null)],
            ),
        ),
        (
            "https hook",
            set(
                &sms_op(),
                &[
                    ("hook", json!("https://127.0.0.1:1/hook")),
                    ("short_link", json!(false)),
                ],
            ),
        ),
        (
            "viber_lifetime 60",
            set(&viber_op("text"), &[("viber_lifetime", json!(60))]),
        ),
        (
            "carousel of 5 slides",
            set(
                &viber_op("carousel"),
                &[("viber_carousel", json!(vec![slide(); 5]))],
            ),
        ),
        (
            "telegram otp of 8 digits",
            set(&telegram_op(), &[("message", json!("01234567"))]),
        ),
        (
            "telegram_lifetime 60",
            set(&telegram_op(), &[("telegram_lifetime", json!(60))]),
        ),
        ("voice without dtmf", unset(&voice_op(), "dtmf")),
        (
            "whatsapp without message or signature",
            json!({"type": "pipeline", "id": 2, "phone": PHONE, "pipeline": ["whatsapp"], "whatsapp": {}}),
        ),
        (
            "pipeline ignores settings of unlisted channels",
            json!({"type": "pipeline", "id": 3, "phone": PHONE, "pipeline": ["sms"],
            "sms": {"message": "m", "signature": "msgw"}, "viber": {"junk": true}}),
        ),
        (
            "rcs+viber+sms with a carousel",
            set(
                &rcs_op("rcs+viber+sms"),
                &[
                    ("viber_type", json!("carousel")),
                    ("viber_carousel", json!([slide(), slide()])),
                ],
            ),
        ),
    ];
    for (name, op) in cases {
        let item = sb.op(op).await;
        assert_eq!(item["success"], true, "{name}: {item}");
    }
}
