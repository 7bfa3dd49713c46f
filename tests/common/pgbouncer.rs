//! PgBouncer in front of a test's PostgreSQL schema, one pooler per test, in session or
//! in transaction mode, as Kubernetes' PostgreSQL operators put one in front of the
//! database. Debian's `pgbouncer` (`.ci/start-postgres` installs it); a test that needs
//! it fails saying how to install it, never passes by skipping.

// Each test target uses what it needs of this module.
#![allow(dead_code)]

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::postgres::{TestSchema, server_url};

/// A PgBouncer serving one schema's role, killed when dropped.
pub struct Bouncer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The schema's role, whose `search_path` (`"$user"`) is its schema.
    role: String,
    child: Child,
    dir: tempfile::TempDir,
}

/// The pgbouncer binary: `MSGW_TEST_PGBOUNCER`, on the PATH, or Debian's.
fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("MSGW_TEST_PGBOUNCER") {
        return path.into();
    }
    let candidates = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| PathBuf::from(d).join("pgbouncer"))
        .chain([PathBuf::from("/usr/sbin/pgbouncer")])
        .collect::<Vec<_>>();
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "pgbouncer is not installed. These tests run msgw through a real PgBouncer:\n\
             \x20 .ci/start-postgres   (Debian/Ubuntu: installs pgbouncer with apt)\n\
             or: apt-get install pgbouncer, or point MSGW_TEST_PGBOUNCER at one."
            )
        })
}

impl Bouncer {
    /// Starts PgBouncer in `mode` (`session` or `transaction`) in front of `schema`:
    /// every client logs in as the schema's role, whatever user it names. Set as
    /// docs/replicas.md's recipe: a client waits at most 5 s for a server session
    /// (not PgBouncer's 120 s), and a failed login is retried after 1 s (not 15 s).
    pub fn start(schema: &TestSchema, mode: &str) -> Self {
        Self::start_with_pool(schema, mode, pool_size(mode))
    }

    /// Starts PgBouncer as [`Bouncer::start`] does, with `pool_size` server sessions.
    pub fn start_with_pool(schema: &TestSchema, mode: &str, pool_size: u32) -> Self {
        let server = url::Url::parse(&server_url()).expect("MSGW_TEST_POSTGRES_URL is a URL");
        let host = server.host_str().unwrap_or("127.0.0.1").to_owned();
        let server_port = server.port().unwrap_or(5432);
        let dbname = server.path().trim_start_matches('/').to_owned();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let ini = dir.path().join("pgbouncer.ini");
            let log = dir.path().join("pgbouncer.log");
            let mut file = std::fs::File::create(&ini).expect("pgbouncer.ini");
            write!(
                file,
                "[databases]\n\
                 msgw = host={host} port={server_port} dbname={dbname} user={role}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = {mode}\n\
                 default_pool_size = {pool_size}\n\
                 max_client_conn = 500\n\
                 query_wait_timeout = 5\n\
                 server_login_retry = 1\n\
                 logfile = {log}\n\
                 log_connections = 0\n\
                 log_disconnections = 0\n",
                role = schema.name,
                log = log.display(),
                pool_size = pool_size,
            )
            .expect("write pgbouncer.ini");
            drop(file);
            let mut command = Command::new(binary());
            // PgBouncer refuses to run as root: as the postgres user then.
            if is_root() {
                make_writable(dir.path());
                command = Command::new("setpriv");
                command.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"]);
                command.arg(binary());
            }
            // Its log goes to its file alone (`-q`), what it says before that to a file
            // too: a pipe nobody reads would fill up and stop it mid-test.
            let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
            let mut child = command
                .arg("-q")
                .arg(&ini)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("start pgbouncer");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                    return Self {
                        port,
                        role: schema.name.clone(),
                        child,
                        dir,
                    };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let stderr =
                        std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
                    let logged = std::fs::read_to_string(&log).unwrap_or_default();
                    last_error = format!("pgbouncer exited ({status}): {stderr}{logged}");
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("pgbouncer did not listen on {port} within 10 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("cannot start pgbouncer: {last_error}");
    }

    /// msgw's store URL through it (no startup options: PgBouncer refuses them).
    pub fn url(&self) -> String {
        format!(
            "postgres://{role}@127.0.0.1:{port}/msgw?application_name={role}",
            role = self.role,
            port = self.port
        )
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what the pooler saw.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("pgbouncer.log"));
            let log = log.unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "pgbouncer's log, last lines:\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// Server sessions per pool: in session mode each of msgw's connections holds one for
/// its life (up to 18 per replica: 16 in its pool, one of them LISTENing, and 2 on the
/// send path), and the tests run two or three replicas; in transaction mode a few
/// serve every replica, as in production.
fn pool_size(mode: &str) -> u32 {
    if mode == "session" { 100 } else { 20 }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Lets the postgres user write PgBouncer's log in `dir`.
fn make_writable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
}
