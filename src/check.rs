//! `msgw check`: asks a running msgw's gRPC health service whether it serves, so a
//! Kubernetes `helm test` (or a script) needs nothing but the msgw image.

use crate::config::CheckArgs;
use anyhow::{Context, bail};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// Connects to `args.addr` (`host:port`, or a URL; over TLS with `--tls-ca-file`) and
/// checks `args.service` ("" for the whole server) within `args.timeout`; an error
/// says what is wrong.
pub async fn run(args: &CheckArgs) -> anyhow::Result<()> {
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
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(Some(tls))
}
