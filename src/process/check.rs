//! `msgw check`: asks a running msgw's gRPC health service whether it serves, so a
//! Kubernetes `helm test` (or a script) needs nothing but the msgw image.

use crate::process::cli::CheckArgs;
use anyhow::{Context, bail};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// Connects to `args.addr` (`host:port`, or a URL; over TLS with `--tls-ca-file`) and
/// checks `args.service` ("" for the whole server) within `args.timeout`; an error
/// says what is wrong.
pub async fn run(args: &CheckArgs) -> anyhow::Result<()> {
    let tls = args.tls_ca_file.is_some();
    let identity = args.tls_cert_file.is_some();
    check(args)
        .await
        .map_err(|e| match hint(&format!("{e:#}"), tls, identity) {
            Some(hint) => e.context(hint),
            None => e,
        })
}

/// What to do about a failed check, recognised from its error chain: the causes
/// a TLS mismatch shows (an HTTP/2 frame error, a broken pipe, `UnknownIssuer`) say
/// nothing to whoever reads them.
fn hint(chain: &str, tls: bool, identity: bool) -> Option<&'static str> {
    let chain = chain.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| chain.contains(w));
    // A TLS server closes on a plaintext client's first bytes, or answers with an alert
    // that HTTP/2 reads as a bad frame.
    Some(
        if !tls
            && has(&[
                "frame with invalid size",
                "invalid http/2",
                "h2 protocol error",
                "broken pipe",
                "connection reset",
            ])
        {
            "the server speaks TLS: pass --tls-ca-file with the CA that signs its certificate"
        } else if tls && has(&["unknownissuer", "unknown issuer", "badsignature"]) {
            "the CA in --tls-ca-file does not sign the server's certificate: pass the CA that does"
        } else if tls && has(&["notvalidforname", "not valid for name"]) {
            "the server's certificate does not name this host: pass --tls-server-name with a name it lists"
        } else if tls
            && has(&[
                "invalidcontenttype",
                "corrupt message",
                "wrong version number",
            ])
        {
            "the server speaks plaintext: drop the --tls-* flags"
        } else if tls
            && !identity
            && has(&[
                "certificaterequired",
                "certificate required",
                "broken pipe",
                "connection reset",
                "handshakefailure",
            ])
        {
            "the server wants a client certificate (mTLS): pass --tls-cert-file and --tls-key-file"
        } else if tls
            && identity
            && has(&[
                "unknownca",
                "unknown ca",
                "badcertificate",
                "bad certificate",
                "certificate unknown",
            ])
        {
            "the server does not accept this client certificate: it must be signed by the server's client CA"
        } else if tls && identity && has(&["unsupportedcertificate", "unsupported certificate"]) {
            "the server refuses this client certificate's purpose: it must allow client authentication (extended key usage clientAuth)"
        } else if has(&["connection refused"]) {
            "nothing listens there: is msgw running, and is this its gRPC port (MSGW_GRPC_ADDR)?"
        } else {
            return None;
        },
    )
}

async fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let (addr, service, timeout) = (&args.addr, &args.service, args.timeout);
    let scheme = if args.tls_ca_file.is_some() {
        "https"
    } else {
        "http"
    };
    let url = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("{scheme}://{addr}")
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .with_context(|| format!("--addr {addr:?} is not host:port or a URL"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    if let Some(tls) = tls(args)? {
        endpoint = endpoint.tls_config(tls).context("TLS configuration")?;
    }
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to msgw at {url}"))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .with_context(|| format!("health check of {url} failed"))?
        .into_inner();
    let status = ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown);
    if status != ServingStatus::Serving {
        bail!(
            "msgw at {url} answers {} for service {service:?}",
            status.as_str_name()
        );
    }
    println!("msgw at {url}: SERVING");
    Ok(())
}

/// The TLS client configuration the flags ask for, if any.
fn tls(args: &CheckArgs) -> anyhow::Result<Option<ClientTlsConfig>> {
    let Some(ca) = &args.tls_ca_file else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
    if let Some(name) = &args.tls_server_name {
        tls = tls.domain_name(name.clone());
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) {
        let pem = read(cert)?;
        if let Some(why) = not_for_clients(&pem) {
            bail!(
                "--tls-cert-file {} cannot be used as a client certificate: {why}",
                cert.display()
            );
        }
        tls = tls.identity(Identity::from_pem(pem, read(key)?));
    }
    Ok(Some(tls))
}

/// Why the first certificate of `pem` cannot identify a TLS client, if it cannot: an
/// extended key usage without `clientAuth` (a server certificate), which a server
/// refuses with nothing more than an `UnsupportedCertificate` alert.
fn not_for_clients(pem: &str) -> Option<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let usage = cert.extended_key_usage().ok()??.value;
    if usage.client_auth || usage.any {
        return None;
    }
    let allowed: Vec<&str> = [
        (usage.server_auth, "serverAuth"),
        (usage.code_signing, "codeSigning"),
        (usage.email_protection, "emailProtection"),
        (usage.time_stamping, "timeStamping"),
        (usage.ocsp_signing, "OCSPSigning"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    Some(format!(
        "its extended key usage is {} without clientAuth (\"TLS Web Client Authentication\"), which msgw refuses in the handshake. Issue the caller's certificate with extendedKeyUsage=clientAuth (docs/security.md has a recipe)",
        if allowed.is_empty() {
            "only other purposes".to_owned()
        } else {
            allowed.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::{hint, not_for_clients};

    #[test]
    fn tls_mismatches_get_a_hint_that_says_what_to_do() {
        let cases = [
            (
                "h2 protocol error: http2 error: frame with invalid size",
                false,
                false,
                "speaks TLS",
            ),
            (
                "transport error: connection error: stream closed because of a broken pipe",
                false,
                false,
                "speaks TLS",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                true,
                false,
                "does not sign",
            ),
            (
                "invalid peer certificate: NotValidForName",
                true,
                false,
                "--tls-server-name",
            ),
            (
                "received corrupt message of type InvalidContentType",
                true,
                false,
                "plaintext",
            ),
            (
                "transport error: Broken pipe (os error 32)",
                true,
                false,
                "client certificate",
            ),
            ("received fatal alert: UnknownCA", true, true, "client CA"),
            (
                "received fatal alert: UnsupportedCertificate",
                true,
                true,
                "clientAuth",
            ),
            (
                "tcp connect error: Connection refused (os error 111)",
                false,
                false,
                "nothing listens",
            ),
        ];
        for (chain, tls, identity, want) in cases {
            let got = hint(chain, tls, identity).unwrap_or_default();
            assert!(got.contains(want), "{chain}: {got:?}");
        }
        assert_eq!(hint("status: NOT_SERVING", false, false), None);
    }

    #[test]
    fn a_server_certificate_offered_as_a_client_certificate_is_explained() {
        let issue = |usage: Vec<rcgen::ExtendedKeyUsagePurpose>| {
            let mut params = rcgen::CertificateParams::new(vec!["probe".to_owned()]).unwrap();
            params.extended_key_usages = usage;
            let key = rcgen::KeyPair::generate().unwrap();
            params.self_signed(&key).unwrap().pem()
        };
        let why = not_for_clients(&issue(vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth]))
            .expect("refused");
        assert!(why.contains("serverAuth without clientAuth"), "{why}");
        assert_eq!(
            not_for_clients(&issue(vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth])),
            None
        );
        // No extended key usage at all: any purpose.
        assert_eq!(not_for_clients(&issue(Vec::new())), None);
    }
}
