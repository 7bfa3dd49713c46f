//! A PostgreSQL schema of its own for one test, dropped when the test ends (also when
//! it fails). The server is the one `MSGW_TEST_POSTGRES_URL` names, by default the
//! local one CI provides; if it cannot be reached the test fails saying how to start
//! it — it never passes by skipping.

// Each test target uses what it needs of this module.
#![allow(dead_code)]

use sqlx::Connection;

/// The server tests use unless `MSGW_TEST_POSTGRES_URL` names another.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema created for one test, and a login role of its own that owns it (so a
/// test can cut off its own msgw, and only it, from the database).
pub struct TestSchema {
    /// msgw's store URL for this schema (`search_path` set to it, logged in as the
    /// schema's role, connections named after the schema).
    pub url: String,
    /// The schema's name, also its role's.
    pub name: String,
    admin: String,
}

/// The server's URL.
pub fn server_url() -> String {
    std::env::var("MSGW_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A connection to the server, or a failure that says how to get one.
pub async fn connect(url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(url).await.unwrap_or_else(|e| {
        panic!(
            "PostgreSQL is not reachable at {url}: {e}\n\
             These tests need a real PostgreSQL server (trust auth, database `test`). Start one:\n\
             \x20 .ci/start-postgres   (Debian/Ubuntu: installs it with apt, allows local trust auth, creates `test`)\n\
             or: docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test postgres:16\n\
             or point MSGW_TEST_POSTGRES_URL at another server."
        )
    })
}

impl TestSchema {
    /// Creates a fresh schema.
    pub async fn create() -> Self {
        let admin = server_url();
        let mut conn = connect(&admin).await;
        let name = format!("msgw_test_{:016x}", rand::random::<u64>());
        for statement in [
            format!("CREATE ROLE {name} LOGIN"),
            format!("CREATE SCHEMA {name} AUTHORIZATION {name}"),
        ] {
            sqlx::query(&statement)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        let _ = conn.close().await;
        let mut url = url::Url::parse(&admin).expect("MSGW_TEST_POSTGRES_URL is a URL");
        url.set_username(&name).expect("a user in the URL");
        url.set_password(None).expect("no password");
        url.query_pairs_mut()
            .append_pair("options", &format!("-c search_path={name}"))
            .append_pair("application_name", &name);
        Self {
            url: url.to_string(),
            name,
            admin,
        }
    }

    /// Kills msgw's connections, as a database restart would; msgw may connect again.
    pub async fn terminate_connections(&self) {
        self.admin(&[format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{}'",
            self.name
        )])
        .await;
    }

    /// Cuts msgw off: its role may no longer log in, its connections are killed.
    pub async fn outage(&self) {
        self.admin(&[
            format!("ALTER ROLE {} NOLOGIN", self.name),
            format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{}'",
                self.name
            ),
        ])
        .await;
    }

    /// Lets msgw log in again.
    pub async fn recover(&self) {
        self.admin(&[format!("ALTER ROLE {} LOGIN", self.name)])
            .await;
    }

    /// Kills every connection msgw has open (they may reconnect at once).
    pub async fn kill_connections(&self) -> u64 {
        let mut conn = connect(&self.admin).await;
        let (killed,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1) t",
        )
        .bind(&self.name)
        .fetch_one(&mut conn)
        .await
        .expect("pg_terminate_backend");
        let _ = conn.close().await;
        killed as u64
    }

    async fn admin(&self, statements: &[String]) {
        let mut conn = connect(&self.admin).await;
        for statement in statements {
            sqlx::query(statement)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        let _ = conn.close().await;
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = on_own_runtime(async move {
            let mut conn = sqlx::PgConnection::connect(&admin).await?;
            // Never hang a test run on a lock a still-running msgw holds.
            sqlx::query("SET lock_timeout = '10s'")
                .execute(&mut conn)
                .await?;
            // No msgw of this test may reconnect while its schema goes away.
            for statement in [
                format!("ALTER ROLE {name} NOLOGIN"),
                format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'"
                ),
                format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
            ] {
                sqlx::query(&statement).execute(&mut conn).await?;
            }
            // The terminated sessions take a moment to end.
            let mut tries = 0;
            while let Err(e) = sqlx::query(&format!("DROP ROLE IF EXISTS {name}"))
                .execute(&mut conn)
                .await
            {
                tries += 1;
                if tries == 50 {
                    return Err(e);
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            conn.close().await
        });
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the test schema {}", self.name);
        }
    }
}

/// Runs `work` to its end on a runtime of its own, in a thread of its own: a drop may
/// run inside a test's runtime (tests using a schema run on the multi-thread runtime,
/// so msgw's tasks can finish what holds a lock meanwhile), or while a failed test
/// unwinds.
pub fn on_own_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> std::thread::Result<T> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(work)
    })
    .join()
}

/// A database of its own beside `test`, owned by a test schema's role and holding a
/// schema of that name (so a URL whose search_path names the schema finds one there
/// too), dropped when the test ends, before the schema's role.
pub struct TestDatabase {
    /// Its name.
    pub name: String,
    /// The schema's URL, on this database.
    pub url: String,
}

impl TestDatabase {
    /// Creates it for `schema`.
    pub async fn create(schema: &TestSchema) -> Self {
        let name = format!("{}_db", schema.name);
        let mut admin = connect(&schema.admin).await;
        let create = format!("CREATE DATABASE {name} OWNER {}", schema.name);
        sqlx::query(&create).execute(&mut admin).await.unwrap();
        let _ = admin.close().await;
        let mut there = url::Url::parse(&schema.admin).expect("a URL");
        there.set_path(&name);
        let mut conn = connect(there.as_str()).await;
        let create = format!("CREATE SCHEMA {0} AUTHORIZATION {0}", schema.name);
        sqlx::query(&create).execute(&mut conn).await.unwrap();
        let _ = conn.close().await;
        let mut url = url::Url::parse(&schema.url).expect("a URL");
        url.set_path(&name);
        Self {
            name,
            url: url.to_string(),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (server, name) = (server_url(), self.name.clone());
        let dropped = on_own_runtime(async move {
            let mut conn = sqlx::PgConnection::connect(&server).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await
        });
        if !matches!(dropped, Ok(Ok(_))) {
            eprintln!("could not drop the test database {}", self.name);
        }
    }
}
