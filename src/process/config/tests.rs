//! How flags and environment become a Config, and what is refused.

use super::*;
use crate::process::cli::{Cli, Command};

/// `msgw serve ARGS` as `main` takes it: every problem of parsing and of the checks
/// after it, one line each.
/// Ports not given are loopback port 0, so a port busy on this machine is no problem
/// of a test that is not about ports.
fn serve(args: &[&str]) -> anyhow::Result<Config> {
    let ports = ["--grpc-addr", "--http-addr", "--admin-addr"]
        .into_iter()
        .filter(|flag| !args.contains(flag))
        .flat_map(|flag| [flag, "127.0.0.1:0"]);
    let argv = ["msgw", "serve"]
        .into_iter()
        .chain(ports)
        .chain(args.iter().copied())
        .map(Into::into)
        .collect();
    let (cli, mut problems) = problems::parse(argv)?;
    let config = match cli {
        Some(Cli {
            command: Command::Serve(args),
        }) => Some(args.into_config()),
        _ => None,
    };
    match config {
        Some(Ok(config)) if problems.is_empty() => Ok(config),
        Some(Err(error)) => {
            problems.extend(error.downcast::<Problems>()?.0);
            Err(Problems(problems).into())
        }
        _ => Err(Problems(problems).into()),
    }
}

#[test]
fn durations_beyond_ten_years_are_refused_with_the_flag_named() {
    for flag in [
        "--upstream-settle",
        "--upstream-timeout",
        "--idempotency-retention",
    ] {
        let error = serve(&[flag, "100000000000d"]).unwrap_err().to_string();
        assert!(error.contains(flag) && error.contains("3650d"), "{error}");
    }
    assert!(serve(&["--upstream-settle", "3650d"]).is_ok());
}

#[test]
fn listen_addresses_take_host_names() {
    let config = serve(&[
        "--grpc-addr",
        "localhost:58351",
        "--http-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "[::1]:9091",
    ])
    .unwrap();
    let grpc = config.grpc_addr.addrs();
    assert!(
        grpc.iter()
            .all(|a| a.ip().is_loopback() && a.port() == 58351),
        "{grpc:?}"
    );
    assert!(grpc[0].is_ipv4(), "{grpc:?}");
    assert_eq!(config.http_addr.addrs(), ["127.0.0.1:0".parse().unwrap()]);
    assert_eq!(config.admin_addr.addrs(), ["[::1]:9091".parse().unwrap()]);
    let error = serve(&["--grpc-addr", "localhost"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("HOST:PORT"), "{error}");
}

#[test]
fn a_postgres_store_needs_the_secrets_every_replica_shares_all_named_at_once() {
    let pg = ["--store-url", "postgres://msgw@db/msgw"];
    let error = serve(&pg).unwrap_err().to_string();
    for missing in [
        "MSGW_WEBHOOK_SECRET",
        "MSGW_ACCOUNT_TOKEN",
        "MSGW_VERIFY_SECRET",
    ] {
        assert!(
            error.contains(&format!("{missing} (")),
            "{missing}: {error}"
        );
    }
    assert_eq!(error.lines().count(), 3, "{error}");
    let secret = ["--webhook-secret", "0123456789abcdef0123"];
    let token = ["--account-token", "0123456789abcdef0123"];
    let verify = ["--verify-secret", "fedcba9876543210fedc"];
    let config = serve(&[&pg[..], &secret[..], &token[..], &verify[..]].concat()).unwrap();
    assert_eq!(config.store_url, "postgres://msgw@db/msgw");
    assert!(config.store_password.is_none());
}

#[test]
fn a_busy_port_is_said_with_the_other_problems_in_one_round() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let args = [
        "--store-url",
        "postgres://msgw@db/msgw",
        "--grpc-addr",
        &busy,
    ];
    let error = serve(&args).unwrap_err().to_string();
    assert_eq!(
        error.lines().count(),
        4,
        "three secrets and the port: {error}"
    );
    assert!(error.contains("MSGW_GRPC_ADDR"), "{error}");
    assert!(error.contains(&busy), "{error}");
    assert!(error.contains("MSGW_VERIFY_SECRET ("), "{error}");
}

#[test]
fn a_previous_webhook_secret_needs_the_new_one_and_its_length() {
    let error = serve(&["--webhook-secret-previous", "0123456789abcdef0123"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("a rotation needs the new secret"), "{error}");
    let error = serve(&[
        "--webhook-secret",
        "0123456789abcdef0123",
        "--webhook-secret-previous",
        "short",
    ])
    .unwrap_err()
    .to_string();
    assert!(error.contains("at least 16"), "{error}");
    let config = serve(&[
        "--webhook-secret",
        "0123456789abcdef0123",
        "--webhook-secret-previous",
        "the-old-secret-0123456",
    ])
    .unwrap();
    assert!(config.webhook_secret_previous.is_some());
}

#[test]
fn a_real_gateway_without_caller_authentication_refuses_to_start() {
    let gateway = ["--upstream-url", "https://gw.example", "--api-key", "k"];
    let error = serve(&gateway).unwrap_err().to_string();
    for needed in [
        "MSGW_CALLERS_FILE",
        "MSGW_GRPC_TLS_CLIENT_CA_FILE",
        "MSGW_ALLOW_UNAUTHENTICATED=true",
    ] {
        assert!(error.contains(needed), "{error}");
    }
    // TLS alone authenticates nobody.
    let tls = [
        "--grpc-tls-cert-file",
        "c.pem",
        "--grpc-tls-key-file",
        "k.pem",
    ];
    assert!(serve(&[&gateway[..], &tls[..]].concat()).is_err());
    for enough in [
        &["--callers-file", "callers.toml"][..],
        &[&tls[..], &["--grpc-tls-client-ca-file", "ca.pem"][..]].concat(),
        &["--allow-unauthenticated"][..],
        &["--allow-unauthenticated", "true"][..],
    ] {
        let config = serve(&[&gateway[..], enough].concat());
        assert!(config.is_ok(), "{enough:?}: {config:?}");
    }
    let error = serve(&[&gateway[..], &["--allow-unauthenticated", "false"][..]].concat());
    assert!(error.is_err());
    // The sandbox stays open with nothing configured.
    let config = serve(&[]).unwrap();
    assert!(config.callers_file.is_none() && config.tls.is_none());
}

#[test]
fn tls_files_come_in_pairs_and_a_client_ca_needs_them() {
    let error = serve(&["--grpc-tls-cert-file", "c.pem"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("--grpc-tls-key-file"), "{error}");
    let error = serve(&["--grpc-tls-client-ca-file", "ca.pem"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("--grpc-tls-cert-file"), "{error}");
    let config = serve(&[
        "--grpc-tls-cert-file",
        "c.pem",
        "--grpc-tls-key-file",
        "k.pem",
        "--grpc-tls-client-ca-file",
        "ca.pem",
    ])
    .unwrap();
    let tls = config.tls.unwrap();
    assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
}

#[test]
fn store_urls_and_password_files_are_checked() {
    let error = serve(&["--store-url", "mysql://db/msgw"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("sqlite://PATH"), "{error}");
    let error = serve(&["--store-password-file", "/nonexistent"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("for a postgres:// MSGW_STORE_URL only"),
        "{error}"
    );
}

#[test]
fn a_transaction_pooler_needs_postgres_and_the_direct_url() {
    let secrets = [
        "--webhook-secret",
        "0123456789abcdef0123",
        "--account-token",
        "0123456789abcdef0123",
        "--verify-secret",
        "fedcba9876543210fedc",
    ];
    let pg = ["--store-url", "postgres://msgw@pooler:6432/msgw"];
    let pooled = ["--store-pooling", "transaction"];
    let error = serve(&[&pg[..], &pooled[..], &secrets[..]].concat())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("MSGW_STORE_POOLING") && error.contains("needs MSGW_STORE_DIRECT_URL"),
        "{error}"
    );
    let error = serve(&["--store-pooling", "statement"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("not a pooling mode"), "{error}");
    let direct = ["--store-direct-url", "postgres://msgw:secret@db/msgw"];
    let error = serve(&direct).unwrap_err().to_string();
    assert!(
        error.contains("for a postgres:// MSGW_STORE_URL only") && !error.contains("secret@"),
        "{error}"
    );
    let config = serve(&[&pg[..], &pooled[..], &direct[..], &secrets[..]].concat()).unwrap();
    let target = config.store_target();
    assert_eq!(target.pooling, crate::adapters::store::Pooling::Transaction);
    assert_eq!(
        target.direct_url.as_deref(),
        Some("postgres://msgw:secret@db/msgw")
    );
}

#[test]
fn upstream_limits_default_to_the_documented_values() {
    let config = serve(&[]).unwrap();
    assert_eq!(
        config.upstream_limits,
        Limits {
            connections: 8,
            batch_max: 50,
            queue_max: 10_000,
            rate: None,
            burst: None,
            bulk_share: 0.1,
        }
    );
}

#[test]
fn upstream_limits_out_of_range_are_refused_with_the_flag_named() {
    for (args, flag) in [
        (["--upstream-connections", "0"], "--upstream-connections"),
        (["--upstream-batch-max", "0"], "--upstream-batch-max"),
        (["--upstream-batch-max", "1001"], "--upstream-batch-max"),
        (["--upstream-queue-max", "10"], "--upstream-queue-max"),
        (["--upstream-rate", "0"], "--upstream-rate"),
        (["--upstream-burst", "0"], "--upstream-burst"),
        (["--upstream-bulk-share", "0.6"], "--upstream-bulk-share"),
        (["--upstream-burst", "11"], "--upstream-burst"),
    ] {
        let error = serve(&args).unwrap_err().to_string();
        assert!(error.contains(flag), "{args:?}: {error}");
    }
}

#[test]
fn the_defaults_of_serve_are_valid_and_the_types_defaults_agree_with_them() {
    let config = Config::serve_defaults().unwrap();
    assert_eq!(config.upstream_limits, Limits::default());
    assert_eq!(config.grpc_limits, PortLimits::default());
    assert_eq!(config.webhook_limits, ListenerLimits::default());
    assert_eq!(config.reconcile, ReconcileConfig::default());
    assert_eq!(config.verify, crate::core::verify::Settings::default());
    assert_eq!(config.verify.resend_interval, Duration::from_secs(30));
}

#[test]
fn the_fraud_guard_is_on_with_its_defaults() {
    let config = serve(&[]).unwrap();
    assert_eq!(
        config.verify.guard,
        crate::core::verify::guard::Settings::default()
    );
    assert_eq!(config.retention.guard_max_age, Duration::from_secs(3600));
}

#[test]
fn fraud_guard_flags_are_parsed_and_checked_together() {
    let config = serve(&[
        "--verify-fraud-guard",
        "shadow",
        "--verify-key-limits",
        "ip=10/1h,user=5/1d",
        "--verify-country-limits",
        "380=2000/1h,*=200/1h",
        "--verify-safe-prefixes",
        "+380000000",
    ])
    .unwrap();
    let guard = &config.verify.guard;
    assert_eq!(guard.mode, crate::core::verify::guard::Mode::Shadow);
    assert_eq!(guard.key_limits.of("user").unwrap().max, 5);
    assert_eq!(guard.country_limits.of("44").unwrap().max, 200);
    assert!(guard.safe_prefixes.covers("380000000011"));
    assert_eq!(config.retention.guard_max_age, Duration::from_secs(86_400));
    for (args, named) in [
        (
            &["--verify-fraud-guard", "maybe"][..],
            "--verify-fraud-guard",
        ),
        (
            &["--verify-key-limits", "ip=ten/1h"][..],
            "--verify-key-limits",
        ),
        (
            &["--verify-country-limits", "3801=1/1h"][..],
            "--verify-country-limits",
        ),
        (
            &["--verify-guard-min-conversion", "2"][..],
            "--verify-guard-min-conversion",
        ),
        (
            &["--verify-guard-grace", "2h"][..],
            "MSGW_VERIFY_GUARD_GRACE",
        ),
        (
            &["--verify-guard-prefix-digits", "1"][..],
            "MSGW_VERIFY_GUARD_PREFIX_DIGITS",
        ),
    ] {
        let error = serve(args).unwrap_err().to_string();
        assert!(error.contains(named), "{args:?}: {error}");
    }
}

#[test]
fn a_short_secret_on_postgres_is_too_short_not_also_unset() {
    let error = serve(&[
        "--store-url",
        "postgres://msgw@127.0.0.1/msgw",
        "--webhook-secret",
        "x",
        "--account-token",
        "account-token-0123456789",
        "--verify-secret",
        "verify-secret-0123456789",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("is set (1 character, not shown): must be at least 16 characters"),
        "{error}"
    );
    assert!(!error.contains("is not set"), "{error}");
}
