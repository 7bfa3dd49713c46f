//! A PostgreSQL schema of its own for one test, dropped when the test ends (also when
//! it fails). The server is the one `MSGW_TEST_POSTGRES_URL` names, by default the
//! local one CI provides; if it cannot be reached the test fails saying how to start
//! it — it never passes by skipping.

use sqlx::Connection;

/// The server tests use unless `MSGW_TEST_POSTGRES_URL` names another.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema created for one test.
pub struct TestSchema {
    /// msgw's store URL for this schema (`search_path` set to it).
    pub url: String,
    /// The schema's name.
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
             \x20 sudo apt-get install -y postgresql && sudo service postgresql start\n\
             \x20 sudo -u postgres psql -c 'CREATE DATABASE test' \n\
             \x20 (and `host all all 127.0.0.1/32 trust` in pg_hba.conf)\n\
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
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&mut conn)
            .await
            .expect("create the test schema");
        let _ = conn.close().await;
        let separator = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{separator}options=-c%20search_path%3D{name}");
        Self { url, name, admin }
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // A runtime of its own: this may run inside a test's runtime (tests using a
        // schema run on the multi-thread runtime, so msgw's tasks can finish what holds
        // a lock meanwhile), or while a failed test unwinds.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let mut conn = sqlx::PgConnection::connect(&admin).await?;
                // Never hang a test run on a lock a still-running msgw holds.
                sqlx::query("SET lock_timeout = '10s'")
                    .execute(&mut conn)
                    .await?;
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the test schema {}", self.name);
        }
    }
}
