//! One store test suite, two stores: every test here runs against SQLite and against
//! a real PostgreSQL server (a schema of its own per test), so the two cannot drift,
//! and against PostgreSQL through PgBouncer, in session and in transaction mode.

#[path = "../common/pgbouncer.rs"]
mod pgbouncer;
#[path = "../common/postgres.rs"]
mod postgres;

mod claims;
mod copy;
mod events;
mod guard;
mod guard_codes;
mod lookups;
mod pooler;
mod reply_times;
mod scheduled;
mod shared;
mod sqlite_locking;
mod suppressions;
mod verifications;

use std::{sync::Arc, time::Duration};

use msgw::adapters::store::{Pooling, StoreTarget};
use msgw::core::ports::store::Store;

/// A store under test; `open` returns another handle on it (as another replica would).
pub struct Fixture {
    target: StoreTarget,
    // Dropped before the schema it serves.
    _bouncer: Option<pgbouncer::Bouncer>,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<postgres::TestSchema>,
}

impl Fixture {
    async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self {
            target: StoreTarget::new(format!("sqlite://{}", dir.path().join("msgw.db").display())),
            _bouncer: None,
            _dir: Some(dir),
            _schema: None,
        }
    }

    pub async fn postgres() -> Self {
        let schema = postgres::TestSchema::create().await;
        Self {
            target: StoreTarget::new(&schema.url),
            _bouncer: None,
            _dir: None,
            _schema: Some(schema),
        }
    }

    /// PostgreSQL through PgBouncer in `pooling`'s mode; in transaction mode with the
    /// schema's own URL as the direct one.
    pub async fn pgbouncer(pooling: Pooling) -> Self {
        let schema = postgres::TestSchema::create().await;
        let bouncer = pgbouncer::Bouncer::start(&schema, pooling.as_str());
        let mut target = StoreTarget::new(bouncer.url());
        target.pooling = pooling;
        if pooling == Pooling::Transaction {
            target.direct_url = Some(schema.url.clone());
        }
        Self {
            target,
            _bouncer: Some(bouncer),
            _dir: None,
            _schema: Some(schema),
        }
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        &self.target.url
    }

    /// A handle on the store (migrated on first open).
    pub async fn open(&self) -> Arc<dyn Store> {
        msgw::adapters::store::open(&self.target, Duration::ZERO)
            .await
            .expect("open the store")
    }
}

/// Each test, once per store.
macro_rules! on_both_stores {
    ($($module:ident :: $test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::$module::$test(crate::Fixture::sqlite().await).await
                }
            )*
        }
        mod postgresql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::$module::$test(crate::Fixture::postgres().await).await
                }
            )*
        }
        /// Through PgBouncer in session mode.
        mod pgbouncer_session {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let fixture = crate::Fixture::pgbouncer(msgw::adapters::store::Pooling::Session);
                    crate::$module::$test(fixture.await).await
                }
            )*
        }
        /// Through PgBouncer in transaction mode.
        mod pgbouncer_transaction {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let fixture = crate::Fixture::pgbouncer(msgw::adapters::store::Pooling::Transaction);
                    crate::$module::$test(fixture.await).await
                }
            )*
        }
    };
}

on_both_stores!(
    claims::the_second_claim_of_an_id_in_one_group_sees_the_first,
    claims::a_take_over_wins_once_and_fences_the_old_owner,
    claims::taking_over_a_pruned_claim_claims_it_anew,
    claims::retention_never_drops_a_claim_whose_outcome_is_open,
    claims::an_accepted_outcome_reads_back_exactly,
    claims::a_group_of_settlements_fences_each_id_and_tracks_only_what_it_settled,
    claims::a_group_out_of_id_order_is_answered_in_its_own_order,
    claims::a_group_of_take_overs_is_answered_in_its_own_order,
    claims::groups_taking_over_the_same_ids_in_opposite_orders_do_not_deadlock,
    claims::replicas_claiming_the_same_ids_at_once_own_each_exactly_once,
    claims::a_settle_window_survives_a_take_over_and_a_claim_is_open_for_reconcile_only_after_it,
    claims::a_claim_records_its_caller_and_its_messages_events_carry_it,
    lookups::a_lookups_backoff_reads_back_keeps_reconcile_off_and_a_take_over_clears_it,
    events::appends_hand_out_increasing_cursors_and_skip_duplicates,
    events::every_field_of_an_event_reads_back_exactly,
    events::retention_drops_old_events_but_never_reuses_a_cursor,
    events::cursors_commit_in_order_across_concurrent_appenders,
    events::a_messages_final_event_is_found_before_newer_ones,
    scheduled::a_scheduled_message_is_claimed_kept_and_cancelled_once,
    scheduled::due_messages_are_taken_by_one_replica_until_the_lease_ends,
    scheduled::retention_keeps_a_scheduled_claim,
    shared::a_due_message_is_taken_by_one_replica_until_its_lease_ends,
    shared::a_lease_is_held_by_one_replica_until_it_expires,
    shared::the_sandboxs_state_reads_back_as_saved_from_any_replica,
    verifications::a_verification_reads_back_exactly_by_number_and_by_send,
    verifications::a_caller_has_one_pending_verification_per_number_within_its_limit,
    verifications::concurrent_wrong_codes_on_two_replicas_take_at_most_its_checks,
    verifications::two_right_codes_on_two_replicas_approve_once,
    verifications::a_resend_holds_once_per_interval_and_for_its_sends,
    verifications::expired_verifications_are_marked_once_and_pruned_after_the_hour,
    verifications::concurrent_starts_of_one_number_start_one_verification,
    guard::a_range_is_held_by_its_unconverted_starts_and_approvals_keep_it_open,
    guard::limits_count_exactly_across_replicas_starting_at_once,
    guard::a_release_judges_the_range_afresh_and_prune_drops_old_counts,
    guard_codes::a_resends_code_counts_against_its_keys_the_budget_and_the_range,
    guard_codes::a_calling_code_spread_over_ranges_is_held_at_its_cap_on_two_replicas,
    guard_codes::a_key_that_approved_a_code_passes_a_hold_and_a_new_key_does_not,
    guard_codes::a_safe_prefix_is_never_held_but_its_codes_count_against_keys,
    suppressions::a_callers_change_commits_with_its_event_and_reads_back,
    suppressions::a_claims_group_reads_the_list_in_the_same_store_call,
    suppressions::concurrent_claims_groups_each_read_their_own_numbers,
    suppressions::keyword_replies_change_their_messages_number_once_in_order,
    suppressions::the_newest_reply_decides_whatever_order_replies_arrive_in,
    suppressions::replicas_applying_replies_out_of_order_end_in_the_newest_state,
    reply_times::a_repeated_webhook_does_not_reapply_a_reply_that_changed_nothing,
    reply_times::a_reply_whose_time_cannot_be_read_never_lifts_an_opt_out,
);
