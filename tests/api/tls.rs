//! TLS and mTLS on the gRPC port: certificates made here with rcgen, reloaded from
//! their files while msgw runs.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use msgw::{
    transport::auth::{
        incoming::PeerInfo,
        tls::{TlsFiles, TlsReloader},
    },
    transport::grpc::port::PortLimits,
    transport::proto::GetBalanceRequest,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use tokio::{net::TcpListener, process::Command};
use tonic::transport::Endpoint;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::helpers::{Callers, Entry, Options, TlsClient, money, spawn};

/// A certificate authority of the test.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for `names` (the first is also the common name) and its key, PEM.
    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn server_cert(&self) -> (String, String) {
        self.issue(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    fn client_cert(&self, name: &str) -> (String, String) {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client that trusts this CA, with `identity` for mTLS.
    fn client(&self, identity: Option<(String, String)>) -> TlsClient {
        TlsClient {
            ca: self.pem.clone(),
            identity,
        }
    }
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// msgw's TLS files in `dir`: a server certificate from `ca`, and `client_ca` for mTLS.
fn server_files(dir: &Path, ca: &Ca, client_ca: Option<&Ca>) -> TlsFiles {
    let (cert, key) = ca.server_cert();
    TlsFiles {
        cert: write(dir, "tls.crt", &cert),
        key: write(dir, "tls.key", &key),
        client_ca: client_ca.map(|ca| write(dir, "client-ca.pem", &ca.pem)),
    }
}

/// Whether a new connection through `endpoint` gets a SERVING health answer; the
/// error says why not.
async fn health(endpoint: Endpoint) -> Result<(), String> {
    let channel = endpoint
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .map(drop)
        .map_err(|e| format!("health: {e:?}"))
}

#[tokio::test]
async fn serves_rpcs_over_tls_and_refuses_plaintext_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("msgw test CA");
    let app = spawn(Options {
        tls: Some(server_files(dir.path(), &ca, None)),
        tls_client: Some(ca.client(None)),
        ..Options::default()
    })
    .await;

    let balance = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .expect("GetBalance over TLS")
        .into_inner();
    assert_eq!(balance.amount, money("UAH", 31, 168_300_000));

    let plaintext = Endpoint::from_shared(format!("http://{}", app.addr)).unwrap();
    let refused = health(plaintext).await;
    assert!(refused.is_err(), "a plaintext client was served");
}

#[tokio::test]
async fn reloads_certificates_without_a_restart_and_keeps_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let files = server_files(dir.path(), &old_ca, None);
    let app = spawn(Options {
        tls: Some(files.clone()),
        tls_client: Some(old_ca.client(None)),
        ..Options::default()
    })
    .await;
    // The harness's channel: connected before the rotation, trusting only the old CA,
    // so it can go on working only on the connection it already has.
    let mut opened_before = app.account();
    let (old_client, new_client) = (old_ca.client(None), new_ca.client(None));
    assert!(health(new_client.endpoint(app.addr)).await.is_err());

    let (cert, key) = new_ca.server_cert();
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(error) = health(new_client.endpoint(app.addr)).await {
        assert!(
            Instant::now() < deadline,
            "new connections never got the new certificate: {error}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        health(old_client.endpoint(app.addr)).await.is_err(),
        "a new connection still got the old certificate"
    );
    opened_before
        .get_balance(GetBalanceRequest {})
        .await
        .expect("the connection opened before the reload still serves");
}

#[tokio::test]
async fn mtls_serves_only_clients_with_a_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, other_ca) = (Ca::new("msgw test CA"), Ca::new("someone else's CA"));
    let app = spawn(Options {
        tls: Some(server_files(dir.path(), &ca, Some(&ca))),
        tls_client: Some(ca.client(Some(ca.client_cert("orders.prod.svc")))),
        ..Options::default()
    })
    .await;

    app.account()
        .get_balance(GetBalanceRequest {})
        .await
        .expect("a client certificate from the client CA is served");
    let without = ca.client(None);
    assert!(
        health(without.endpoint(app.addr)).await.is_err(),
        "a client without a certificate was served"
    );
    let foreign = ca.client(Some(other_ca.client_cert("orders.prod.svc")));
    assert!(
        health(foreign.endpoint(app.addr)).await.is_err(),
        "a client certificate from another CA was served"
    );
}

#[tokio::test]
async fn a_layer_reads_the_verified_client_name_from_peer_info() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("msgw test CA");
    let reloader = TlsReloader::load(server_files(dir.path(), &ca, Some(&ca))).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<PeerInfo>>> = Arc::default();
    let layer = tonic::service::InterceptorLayer::new({
        let seen = seen.clone();
        move |request: tonic::Request<()>| {
            if let Some(peer) = request.extensions().get::<PeerInfo>() {
                seen.lock().unwrap().push(peer.clone());
            }
            Ok(request)
        }
    });
    let (_, health_service) = tonic_health::server::health_reporter();
    let service = tower_layer::Layer::layer(&layer, tonic::service::Routes::new(health_service));
    let (_serving, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(msgw::transport::grpc::port::serve(
        listener,
        Some(reloader),
        service,
        PortLimits::default(),
        16,
        usize::MAX,
        msgw::base::metrics::Metrics::new().unwrap(),
        stop,
    ));

    let client = ca.client(Some(ca.client_cert("orders.prod.svc")));
    health(client.endpoint(addr)).await.unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].client_name.as_deref(), Some("orders.prod.svc"));
    assert_eq!(seen[0].remote_addr.map(|a| a.ip()), Some(addr.ip()));
}

/// `grpcurl <args>`: its output, or its error output when it fails.
async fn run_grpcurl(args: &[&str]) -> Result<String, String> {
    let out = Command::new(crate::tools::grpcurl())
        .args(args)
        .output()
        .await
        .expect("grpcurl runs");
    match out.status.success() {
        true => Ok(String::from_utf8(out.stdout).unwrap()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[tokio::test]
async fn grpcurl_lists_and_calls_an_mtls_msgw_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("msgw test CA");
    let (client_cert, client_key) = ca.client_cert("grpcurl");
    let app = spawn(Options {
        tls: Some(server_files(dir.path(), &ca, Some(&ca))),
        tls_client: Some(ca.client(Some((client_cert.clone(), client_key.clone())))),
        ..Options::default()
    })
    .await;
    let ca_file = write(dir.path(), "ca.pem", &ca.pem);
    let cert_file = write(dir.path(), "client.pem", &client_cert);
    let key_file = write(dir.path(), "client.key", &client_key);
    let addr = app.addr.to_string();
    let trust = ["-cacert", ca_file.to_str().unwrap()];
    let identity = [
        "-cert",
        cert_file.to_str().unwrap(),
        "-key",
        key_file.to_str().unwrap(),
    ];

    let out = run_grpcurl(&[&trust[..], &identity, &[&addr, "list"]].concat())
        .await
        .expect("grpcurl list");
    assert!(
        out.lines().any(|l| l == "msgw.v1.AccountService"),
        "AccountService missing from:\n{out}"
    );

    let call = [&addr, "msgw.v1.AccountService/GetBalance"];
    let out = run_grpcurl(&[&trust[..], &identity, &["-d", "{}"], &call].concat())
        .await
        .expect("grpcurl GetBalance");
    let v: Value = serde_json::from_str(&out).expect("grpcurl prints JSON");
    assert_eq!(v["amount"]["units"], "31", "{v}");

    // grpc-go keeps redialing a refused connection until its deadline: keep it short.
    let quick = ["-connect-timeout", "2", "-d", "{}"];
    let refused = run_grpcurl(&[&trust[..], &quick, &call].concat()).await;
    assert!(
        refused.is_err(),
        "grpcurl without a client certificate was served"
    );
}

#[tokio::test]
async fn an_mtls_caller_gets_the_permissions_of_its_callers_file_entry() {
    use msgw::transport::proto::{
        StreamStatusEventsRequest, messaging_service_client::MessagingServiceClient,
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("msgw test CA");
    let app = spawn(Options {
        tls: Some(server_files(dir.path(), &ca, Some(&ca))),
        tls_client: Some(ca.client(Some(ca.client_cert("reporting.prod.svc")))),
        callers: Some(
            Callers::new().caller(Entry::certificate("reporting.prod.svc").permissions(&["query"])),
        ),
        ..Options::default()
    })
    .await;
    app.account()
        .get_balance(GetBalanceRequest {})
        .await
        .expect("its entry permits queries");
    let refused = app
        .messaging()
        .send_sms(crate::helpers::sms(1))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("reporting.prod.svc"),
        "{refused:?}"
    );
    let refused = app
        .events()
        .stream_status_events(StreamStatusEventsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);

    // A certificate from the right CA whose name has no entry may do nothing.
    let unlisted = ca
        .client(Some(ca.client_cert("unlisted.prod.svc")))
        .endpoint(app.addr)
        .connect()
        .await
        .unwrap();
    let refused = MessagingServiceClient::new(unlisted)
        .send_sms(crate::helpers::sms(2))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("no entry"), "{refused:?}");
    assert!(
        app.gateway
            .requests()
            .iter()
            .all(|r| r.body.to_string().contains("balance"))
    );
}

#[tokio::test]
async fn msgw_check_checks_an_mtls_msgw_with_its_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("msgw test CA");
    let (cert, key) = ca.client_cert("probe.prod.svc");
    let app = spawn(Options {
        tls: Some(server_files(dir.path(), &ca, Some(&ca))),
        tls_client: Some(ca.client(Some((cert.clone(), key.clone())))),
        ..Options::default()
    })
    .await;
    let ca_file = write(dir.path(), "ca.pem", &ca.pem);
    let cert_file = write(dir.path(), "probe.pem", &cert);
    let key_file = write(dir.path(), "probe.key", &key);
    let other_ca = write(dir.path(), "other-ca.pem", &Ca::new("another CA").pem);
    let check_with = |ca: Option<&std::path::Path>, identity: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_msgw"));
        command
            .args(["check", "--addr", &format!("localhost:{}", app.addr.port())])
            .args(["--timeout", "5s"]);
        if let Some(ca) = ca {
            command.arg("--tls-ca-file").arg(ca);
        }
        if identity {
            command
                .arg("--tls-cert-file")
                .arg(&cert_file)
                .arg("--tls-key-file")
                .arg(&key_file);
        }
        command.output()
    };
    let check = |identity: bool| check_with(Some(&ca_file), identity);
    let serving = check(true).await.unwrap();
    assert!(serving.status.success(), "{serving:?}");
    assert!(String::from_utf8_lossy(&serving.stdout).contains("https://localhost"));
    let refused = check(false).await.unwrap();
    assert!(
        !refused.status.success(),
        "no client certificate: {refused:?}"
    );
    // Each mismatch says what to do, not only what broke.
    let stderr =
        |output: std::process::Output| String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(stderr(refused).contains("wants a client certificate"));
    let plaintext = check_with(None, false).await.unwrap();
    let plaintext = stderr(plaintext);
    assert!(
        plaintext.contains("the server speaks TLS: pass --tls-ca-file"),
        "{plaintext}"
    );
    let wrong_ca = check_with(Some(&other_ca), true).await.unwrap();
    assert!(stderr(wrong_ca).contains("does not sign the server's certificate"));
    // A server certificate (serverAuth only) offered as the client's.
    let (server_cert, server_key) = ca.server_cert();
    let server_only = Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(["check", "--addr", &format!("localhost:{}", app.addr.port())])
        .arg("--tls-ca-file")
        .arg(&ca_file)
        .arg("--tls-cert-file")
        .arg(write(dir.path(), "server-as-client.pem", &server_cert))
        .arg("--tls-key-file")
        .arg(write(dir.path(), "server-as-client.key", &server_key))
        .output()
        .await
        .unwrap();
    let explained = stderr(server_only);
    assert!(
        explained.contains("cannot be used as a client certificate")
            && explained.contains("serverAuth without clientAuth"),
        "{explained}"
    );
}

/// The certificate recipe of docs/security.md, as written: its shell block run in `dir`.
pub fn run_certificate_recipe(dir: &Path) {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    let start = doc
        .find("# msgw-tls-recipe")
        .expect("the certificate recipe of docs/security.md");
    let block = &doc[start..doc[start..].find("```").map(|end| start + end).unwrap()];
    let ran = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(dir)
        .output()
        .expect("bash runs");
    assert!(
        ran.status.success(),
        "the recipe of docs/security.md fails:\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

#[tokio::test]
async fn the_documented_certificate_recipe_works_verbatim_for_mtls() {
    let dir = tempfile::tempdir().unwrap();
    run_certificate_recipe(dir.path());
    let file = |name: &str| dir.path().join(name);
    let read = |name: &str| std::fs::read_to_string(file(name)).unwrap();
    let app = spawn(Options {
        tls: Some(TlsFiles {
            cert: file("server.pem"),
            key: file("server.key"),
            client_ca: Some(file("ca.pem")),
        }),
        tls_client: Some(TlsClient {
            ca: read("ca.pem"),
            identity: Some((read("client.pem"), read("client.key"))),
        }),
        ..Options::default()
    })
    .await;
    let addr = format!("localhost:{}", app.addr.port());
    let path = |name: &str| file(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let listed = run_grpcurl(&["-cacert", &ca, "-cert", &cert, "-key", &key, &addr, "list"])
        .await
        .expect("grpcurl list with the recipe's client certificate");
    assert!(listed.contains("msgw.v1.MessagingService"), "{listed}");
    // As docs/security.md says: under mTLS even `list` needs the client certificate.
    let refused = run_grpcurl(&["-connect-timeout", "2", "-cacert", &ca, &addr, "list"]).await;
    assert!(
        refused.is_err(),
        "list without a client certificate was served"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(["check", "--addr", &addr, "--tls-ca-file", &ca])
        .args(["--tls-cert-file", &cert, "--tls-key-file", &key])
        .output()
        .await
        .unwrap();
    assert!(check.status.success(), "{check:?}");
}
