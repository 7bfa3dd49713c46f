//! Verifications under ordinary load: starts mixed with sends, many callers at once,
//! on either store. Nothing but the store could refuse a start here (distinct numbers,
//! no callers' rates, room in every queue), so every start must be answered OK: a send
//! committing beside a start must never make the store refuse it.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use msgw::transport::proto::StartVerificationRequest;
use tonic::Code;

use crate::helpers::{Options, TestApp, error_info, sms, spawn};

/// Starts, and sends, in the mix.
const EACH: usize = 200;
/// Callers at once.
const CALLERS: usize = 16;

/// Ukrainian mobile operator codes (libphonenumber's metadata types them mobile).
const MOBILE: [u8; 10] = [50, 63, 66, 67, 68, 93, 95, 96, 97, 98];

/// Verification `n` of the mix: its own number, ids apart from the sends'.
fn start(n: usize) -> StartVerificationRequest {
    StartVerificationRequest {
        id: 100_000 + n as u64,
        // Valid mobile numbers over 100 ranges (the first 6 digits), as sign-ups from
        // everywhere are: one range of 200 unentered codes would be held by the fraud
        // guard.
        phone: format!("+380{}{}{n:06}", MOBILE[n % 10], n / 10 % 10),
        signature: "msgw".into(),
        ..Default::default()
    }
}

/// What the mix was answered: failed starts and failed sends.
#[derive(Default)]
struct Answers {
    starts_failed: Vec<tonic::Status>,
    sends_failed: Vec<tonic::Status>,
}

impl Answers {
    /// The failures the store caused.
    fn store_unavailable(&self) -> usize {
        self.starts_failed
            .iter()
            .chain(&self.sends_failed)
            .filter(|s| s.code() == Code::Unavailable && error_info(s).0 == "STORE_UNAVAILABLE")
            .count()
    }
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let brief = |failed: &[tonic::Status]| -> Vec<String> {
            failed
                .iter()
                .map(|s| format!("{:?}: {}", s.code(), s.message()))
                .collect()
        };
        f.debug_struct("Answers")
            .field("starts_failed", &brief(&self.starts_failed))
            .field("sends_failed", &brief(&self.sends_failed))
            .finish()
    }
}

/// Runs `EACH` starts interleaved with `EACH` sends, `CALLERS` at a time, the callers
/// taking turns over `apps` (replicas of one store).
async fn mixed_load(apps: &[TestApp]) -> Answers {
    let next = Arc::new(AtomicUsize::new(0));
    let callers = (0..CALLERS).map(|caller| {
        let next = next.clone();
        let app = &apps[caller % apps.len()];
        let (mut verification, mut messaging) = (app.verification(), app.messaging());
        async move {
            let mut answers = Answers::default();
            loop {
                let job = next.fetch_add(1, Ordering::Relaxed);
                if job >= 2 * EACH {
                    return answers;
                }
                let n = job / 2;
                if job.is_multiple_of(2) {
                    if let Err(e) = verification.start_verification(start(n)).await {
                        answers.starts_failed.push(e);
                    }
                } else if let Err(e) = messaging.send_sms(sms(1 + n as u64)).await {
                    answers.sends_failed.push(e);
                }
            }
        }
    });
    let mut all = Answers::default();
    for answers in futures_util::future::join_all(callers).await {
        all.starts_failed.extend(answers.starts_failed);
        all.sends_failed.extend(answers.sends_failed);
    }
    all
}

fn assert_all_answered_ok(answers: &Answers) {
    assert_eq!(
        answers.store_unavailable(),
        0,
        "STORE_UNAVAILABLE answers: {answers:#?}"
    );
    assert!(
        answers.starts_failed.is_empty() && answers.sends_failed.is_empty(),
        "every start and every send is answered OK: {answers:#?}"
    );
}

/// The gateway received each start's code and each send once.
fn assert_each_sent_once(apps: &[TestApp]) {
    let mut ids: Vec<u64> = apps
        .iter()
        .flat_map(|app| app.gateway.envelopes().concat())
        .filter_map(|item| item["id"].as_u64())
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<u64> = (0..EACH)
        .flat_map(|n| [1 + n as u64, start(n).id])
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_mixed_with_sends_on_sqlite_are_never_refused_by_the_store() {
    let app = spawn(Options::default()).await;
    let apps = [app];
    let answers = mixed_load(&apps).await;
    assert_all_answered_ok(&answers);
    assert_each_sent_once(&apps);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_mixed_with_sends_on_two_postgres_replicas_are_never_refused_by_the_store() {
    let schema = crate::postgres::TestSchema::create().await;
    let on_schema = || Options {
        store_url: Some(schema.url.clone()),
        ..Options::default()
    };
    let apps = [spawn(on_schema()).await, spawn(on_schema()).await];
    let answers = mixed_load(&apps).await;
    assert_all_answered_ok(&answers);
    assert_each_sent_once(&apps);
}
