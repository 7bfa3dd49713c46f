//! Fix 45: replies applied once whatever they changed (finding 5), and a reply whose
//! time cannot be read never lifts an opt-out (finding 4), on both stores.

use std::time::Duration;

use msgw::core::ports::store::LogAppend;

use crate::Fixture;
use crate::suppressions::{ago, dated_report, listed, sent};

/// Fix 45, finding 5: a reply that changed nothing is remembered too, so a webhook
/// repeated after a newer STOP does not apply its old START again at its new arrival.
pub async fn a_repeated_webhook_does_not_reapply_a_reply_that_changed_nothing(fixture: Fixture) {
    let store = fixture.open().await;
    let s = store.as_ref();
    let n = 380971117796;
    sent(s, 1, n).await;
    sent(s, 2, n).await;
    // Message 1's webhook: START with no datetime and no `updated`, while opted in.
    let first = s
        .append_log(&[dated_report(1, &[("START", None)])])
        .await
        .unwrap();
    assert!(first[0].suppressions.is_empty() && !listed(s, n).await);
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Message 2's: STOP dated now.
    s.append_log(&[dated_report(2, &[("STOP", Some(ago(0)))])])
        .await
        .unwrap();
    assert!(listed(s, n).await);
    tokio::time::sleep(Duration::from_millis(5)).await;
    // The gateway repeats message 1's webhook unchanged: seen, nothing applied.
    let again = s
        .append_log(&[dated_report(1, &[("START", None)])])
        .await
        .unwrap();
    assert!(
        again[0].suppressions.is_empty(),
        "{:?}",
        again[0].suppressions
    );
    assert!(listed(s, n).await, "still opted out");
}

/// Message `id`'s report with one reply `text` whose time was given and not read.
fn unreadable_report(id: u64, text: &str) -> LogAppend {
    let mut append = dated_report(id, &[(text, None)]);
    if let LogAppend::Report { event, .. } = &mut append {
        event.report.replies[0].time_unreadable = true;
    }
    append
}

/// Fix 45, finding 4: a reply whose time cannot be read never undoes a decision whose
/// time is known: such a START does not lift a newer STOP; such a STOP still opts out.
pub async fn a_reply_whose_time_cannot_be_read_never_lifts_an_opt_out(fixture: Fixture) {
    let store = fixture.open().await;
    let s = store.as_ref();
    let (n, m) = (380971117797, 380971117798);
    for (id, to) in [(1, n), (2, n), (3, m)] {
        sent(s, id, to).await;
    }
    s.append_log(&[dated_report(2, &[("STOP", Some(ago(5)))])])
        .await
        .unwrap();
    let start = s
        .append_log(&[unreadable_report(1, "START")])
        .await
        .unwrap();
    assert!(start[0].suppressions.is_empty() && listed(s, n).await);
    let stop = s.append_log(&[unreadable_report(3, "STOP")]).await.unwrap();
    assert_eq!(stop[0].suppressions.len(), 1);
    assert!(listed(s, m).await, "an unreadable STOP still opts out");
}
