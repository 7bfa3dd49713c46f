//! `msgw check`: asks a running msgw's gRPC health service whether it serves, so a
//! Kubernetes `helm test` (or a script) needs nothing but the msgw image.

use std::time::Duration;

use anyhow::{Context, bail};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// Connects to `addr` (`host:port`, or an `http://` URL) and checks `service` (""
/// for the whole server) within `timeout`; an error says what is wrong.
pub async fn run(addr: &str, service: &str, timeout: Duration) -> anyhow::Result<()> {
    let url = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .with_context(|| format!("--addr {addr:?} is not host:port or a URL"))?
        .connect_timeout(timeout)
        .timeout(timeout);
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
