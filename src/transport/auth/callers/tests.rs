//! Unit tests of the callers file: parsing, every refusal naming its entry, rates.

use super::*;

fn sha(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_callers_file_listing_no_caller_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for text in ["", "# all callers moved elsewhere\n"] {
        let path = dir.path().join("callers.toml");
        std::fs::write(&path, text).unwrap();
        let error = Callers::load(&path, None).unwrap_err();
        assert!(error.contains("lists no [[caller]]"), "{error}");
    }
}

#[test]
fn a_hash_pasted_with_sha256sums_dash_still_reads() {
    let hash = sha("t");
    for pasted in [
        format!("{hash}  -"),
        format!("{hash} -"),
        format!(" {hash}\n"),
    ] {
        assert_eq!(parse_sha256(&pasted), parse_sha256(&hash), "{pasted:?}");
    }
    let error = parse_sha256("abc").unwrap_err();
    assert!(error.contains("cut -d' ' -f1"), "{error}");
}

#[test]
fn a_callers_file_maps_token_hashes_to_callers() {
    let text = format!(
        r#"
        [[caller]]
        name = "billing"
        token_sha256 = "{}"
        permissions = ["send", "events"]
        sends_per_second = 2
        burst = 3

        [[caller]]
        name = "audit"
        token_sha256 = "{}"
        events = "all"

        [[caller]]
        name = "orders.prod.svc"
        "#,
        sha("billing-token"),
        sha("audit-token").to_uppercase(),
    );
    let callers = Callers::parse(&text, None).unwrap();
    assert_eq!(callers.len(), 3);
    let billing = callers.by_token("billing-token").unwrap();
    assert_eq!(billing.label(), "billing");
    assert!(billing.may(Permission::Send) && billing.may(Permission::Events));
    assert!(!billing.may(Permission::Query) && !billing.may(Permission::Templates));
    assert_eq!(billing.events, EventScope::Own);
    let audit = callers.by_token("audit-token").unwrap();
    assert!(Permission::DEFAULT.iter().all(|p| audit.may(*p)));
    assert!(
        !audit.may(Permission::Admin),
        "admin is granted only by name"
    );
    assert_eq!(audit.events, EventScope::All);
    assert!(callers.by_token("billing-token ").is_none());
    assert!(callers.by_token(&sha("billing-token")).is_none());
    let rotating = Callers::parse(
        &format!(
            "[[caller]]\nname = \"billing\"\ntoken_sha256 = [\"{}\", \"{}\"]",
            sha("old"),
            sha("new")
        ),
        None,
    )
    .unwrap();
    assert_eq!(rotating.by_token("old").unwrap().label(), "billing");
    assert_eq!(rotating.by_token("new").unwrap().label(), "billing");
    let mtls = CallerName::parse("orders.prod.svc").unwrap();
    assert!(callers.by_name(&mtls).is_some());
}

#[test]
fn a_bad_callers_file_is_refused_with_the_entry_named() {
    let token = sha("t");
    for (text, expected) in [
        (
            "[[caller]]\nname = \"a\"\ntoken_sha256 = \"abc\"",
            "caller[0].token_sha256",
        ),
        ("[[caller]]\nname = \"a b\"", "caller[0].name"),
        (
            "[[caller]]\nname = \"a\"\npermissions = [\"delete\"]",
            "unknown variant",
        ),
        (
            "[[caller]]\nname = \"a\"\npermissions = []",
            "caller[0].permissions is empty",
        ),
        (
            "[[caller]]\nname = \"a\"\nevents = \"some\"",
            "unknown variant",
        ),
        (
            "[[caller]]\nname = \"a\"\ntoken = \"plain\"",
            "unknown field",
        ),
        (
            "[[caller]]\nname = \"a\"\nsends_per_second = 0",
            "sends_per_second",
        ),
        (
            "[[caller]]\nname = \"a\"\nburst = 5",
            "burst needs sends_per_second",
        ),
        (
            "[[caller]]\nname = \"a\"\nsends_per_second = 5\nburst = 0.5",
            "burst must be",
        ),
        (
            "[[caller]]\nname = \"a\"\nqueries_burst = 5",
            "caller[0].queries_burst needs queries_per_second",
        ),
        (
            "[[caller]]\nname = \"a\"\nqueries_per_second = -1",
            "caller[0].queries_per_second must be above 0",
        ),
        (
            "[[caller]]\nname = \"a\"\nqueries_per_second = 5\nqueries_burst = 0",
            "caller[0].queries_burst must be",
        ),
        (
            "[[caller]]\nname = \"a\"\n[[caller]]\nname = \"a\"",
            "listed twice",
        ),
        (
            &format!(
                "[[caller]]\nname = \"a\"\ntoken_sha256 = \"{token}\"\n[[caller]]\nname = \"b\"\ntoken_sha256 = \"{token}\""
            ),
            "listed twice",
        ),
        ("caller = 3", "invalid type"),
    ] {
        let error = Callers::parse(text, None).unwrap_err();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
}

#[test]
fn a_send_rate_refills_and_says_how_long_to_wait() {
    let callers = Callers::parse(
        &format!(
            "[[caller]]\nname = \"a\"\ntoken_sha256 = \"{}\"\nsends_per_second = 10\nburst = 2",
            sha("t")
        ),
        None,
    )
    .unwrap();
    let caller = callers.by_token("t").unwrap();
    assert_eq!(caller.take_sends(2), Ok(()));
    let wait = caller.take_sends(1).unwrap_err().unwrap();
    assert!(wait <= Duration::from_millis(100), "{wait:?}");
    assert_eq!(
        caller.take_sends(3),
        Err(None),
        "more than the burst never fits"
    );
    assert_eq!(caller.take_sends(0), Ok(()));
    // A reload with the same rate keeps the (empty) bucket; a new rate starts full.
    let same = Callers::parse(
        &format!(
            "[[caller]]\nname = \"a\"\ntoken_sha256 = \"{}\"\nsends_per_second = 10\nburst = 2",
            sha("t")
        ),
        Some(&callers),
    )
    .unwrap();
    assert!(same.by_token("t").unwrap().take_sends(1).is_err());
    let faster = Callers::parse(
        &format!(
            "[[caller]]\nname = \"a\"\ntoken_sha256 = \"{}\"\nsends_per_second = 20\nburst = 2",
            sha("t")
        ),
        Some(&callers),
    )
    .unwrap();
    assert_eq!(faster.by_token("t").unwrap().take_sends(2), Ok(()));
}

#[test]
fn a_query_rate_is_its_own_bucket_and_says_how_long_to_wait() {
    let text = format!(
        "[[caller]]\nname = \"a\"\ntoken_sha256 = \"{}\"\nsends_per_second = 1\nburst = 1\nqueries_per_second = 10\nqueries_burst = 2",
        sha("t")
    );
    let callers = Callers::parse(&text, None).unwrap();
    let caller = callers.by_token("t").unwrap();
    assert_eq!(caller.take_query(), Ok(()));
    assert_eq!(caller.take_query(), Ok(()));
    let wait = caller.take_query().unwrap_err();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_millis(100),
        "{wait:?}"
    );
    // The send bucket is untouched by queries, and the other way round.
    assert_eq!(caller.take_sends(1), Ok(()));
    assert!(caller.take_query().is_err());
    // A reload with the same rates keeps both (empty) buckets.
    let same = Callers::parse(&text, Some(&callers)).unwrap();
    let reloaded = same.by_token("t").unwrap();
    assert!(reloaded.take_query().is_err());
    assert!(reloaded.take_sends(1).is_err());
    // Without a query rate, queries are not limited.
    let free = Callers::parse(
        &format!("[[caller]]\nname = \"b\"\ntoken_sha256 = \"{}\"", sha("u")),
        None,
    )
    .unwrap();
    let free = free.by_token("u").unwrap();
    assert!((0..1000).all(|_| free.take_query().is_ok()));
}

#[test]
fn the_anonymous_caller_may_do_everything_and_sees_every_event() {
    let anonymous = Caller::anonymous();
    assert!(Permission::ALL.iter().all(|p| anonymous.may(*p)));
    assert!(anonymous.sees_events_of(None));
    let certified = Caller::certified(CallerName::parse("svc").unwrap());
    assert!(certified.sees_events_of(CallerName::parse("svc").ok().as_ref()));
    assert!(!certified.sees_events_of(CallerName::parse("other").ok().as_ref()));
    assert!(!certified.sees_events_of(None));
}
