//! The contracted rate toward the gateway (`MSGW_UPSTREAM_RATE`) as a pure decision:
//! [`RateWindow`] grants operations so that no second ever holds more than the rate,
//! and no instant more than the burst. The state is plain data, so one process keeps
//! it in memory and replicas keep one copy in their shared store.
//!
//! Paced grants (every lane but the urgent one) also come out of a small bucket of two
//! tenths of a second's worth: a flood of them leaves smoothly at the rate instead of
//! in bursts of a whole second, so the window always frees room within a tenth or two
//! of a second for what is urgent.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Width of the slots the window counts in, in milliseconds.
const SLOT_MS: i64 = 10;
/// The window: one second.
const WINDOW_MS: i64 = 1000;
/// What the window counts beyond its second: an envelope reaches the gateway a little
/// after its grant, later when msgw's cores are busy, and two envelopes granted just
/// over a second apart must not arrive just under one.
const GUARD_MS: i64 = 20;

/// Operations per second toward the gateway, for the whole deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Operations in any one second at most.
    pub per_second: u32,
    /// Operations that may leave at once (`1..=per_second`).
    pub burst: u32,
}

impl RateLimit {
    /// A limit of `per_second` with a burst of `burst` (default: one second's worth),
    /// clamped to `1..=per_second`.
    pub fn new(per_second: u32, burst: Option<u32>) -> Self {
        let per_second = per_second.max(1);
        Self {
            per_second,
            burst: burst.unwrap_or(per_second).clamp(1, per_second),
        }
    }

    /// What paced grants wait for: a tenth of a second's worth (at least one), and no
    /// more than the burst.
    pub fn tenth(self) -> u32 {
        self.per_second.div_ceil(10).min(self.burst).max(1)
    }

    /// The paced bucket's size: two tenths of a second's worth (no more than the
    /// burst), so the time a grant takes to be asked again is not lost to the rate.
    pub fn paced(self) -> u32 {
        (2 * self.tenth()).min(self.burst).max(1)
    }
}

/// What one ask of the rate got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Operations that may leave now (0 or at least what was asked at least).
    pub granted: u32,
    /// When nothing was granted: milliseconds until what was asked at least fits.
    pub retry_in_ms: u64,
}

/// The rate's state: a token bucket of `burst` refilled at the rate, and the grants of
/// the last second in 10 ms slots. Times are milliseconds on one clock (a process's
/// own, or the shared store's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RateWindow {
    /// Tokens in the bucket at `at`.
    tokens: f64,
    /// Tokens in the paced bucket (a tenth of a second's worth at most) at `at`.
    #[serde(default)]
    paced: f64,
    /// When `tokens` was last brought up to date; 0: never (the bucket starts full).
    at: i64,
    /// (slot, operations granted in it), oldest first; only slots of the last second.
    slots: VecDeque<(i64, u32)>,
    /// Until when an urgent grant waits for room: paced grants (from any replica) are
    /// held off the room it waits for; 0: none waits.
    #[serde(default)]
    urgent_waits: i64,
}

impl RateWindow {
    /// Grants up to `want` operations at `now_ms` under `limit`, all of them or none
    /// below `at_least`; `paced` grants also come out of the paced bucket, and wait
    /// while an unpaced (urgent) grant waits for room. Grants are counted in the window
    /// as they are made: one granted and then not sent still counts (the rate errs on
    /// the safe side). The state changes, to be kept, when something is granted or an
    /// unpaced grant is refused.
    pub fn grant(
        &mut self,
        limit: RateLimit,
        now_ms: i64,
        want: u32,
        at_least: u32,
        paced: bool,
    ) -> Grant {
        let rate = f64::from(limit.per_second);
        let burst = f64::from(limit.burst);
        let pace = f64::from(limit.paced());
        if self.at == 0 {
            // A new bucket starts full; the paced one with a tenth of a second's worth,
            // as at any moment of a steady flood: the first envelopes of a flood leave
            // while msgw is busiest taking its calls in, and reach the gateway late.
            (self.tokens, self.paced) = (burst, f64::from(limit.tenth()));
            self.at = now_ms;
        }
        // Time never runs back for the window: a clock read before another grant's
        // (a replica that waited for the row) counts as that grant's time, so nothing
        // is refilled twice and no grant lands in a slot that already left.
        let now_ms = now_ms.max(self.at);
        let refill = (now_ms - self.at) as f64 * rate / 1000.0;
        self.tokens = (self.tokens + refill).min(burst);
        self.paced = (self.paced + refill).min(pace);
        self.at = now_ms;
        // A slot counts until all of it is more than a second (and the guard) old:
        // every window of one second that ends now sees at most the rate.
        while self
            .slots
            .front()
            .is_some_and(|(slot, _)| leaves(*slot) <= now_ms)
        {
            self.slots.pop_front();
        }
        let current = now_ms.div_euclid(SLOT_MS);
        let in_window: u32 = self.slots.iter().map(|(_, n)| n).sum();
        let room = limit.per_second.saturating_sub(in_window);
        // Whole tokens only; a hair under one from float arithmetic still counts as one.
        let whole = |t: f64| (t + 1e-9).floor().max(0.0) as u32;
        let mut bucket = self.tokens;
        if paced {
            bucket = bucket.min(self.paced);
        }
        let available = room.min(whole(bucket));
        let at_least = at_least.clamp(1, if paced { limit.paced() } else { limit.burst });
        // Paced grants wait for a tenth of a second's worth (what is wanted of it), so a
        // flood leaves in envelopes of several operations; never for more than the
        // window has room for, or a full window would hold them back for good.
        let target = if paced {
            at_least.max(limit.tenth().min(want).min(room))
        } else {
            at_least
        };
        if paced && now_ms < self.urgent_waits {
            // An urgent grant waits for the next room: it goes first, whichever replica
            // asks for it.
            return Grant {
                granted: 0,
                retry_in_ms: (self.urgent_waits - now_ms) as u64,
            };
        }
        if available >= target && want > 0 {
            let granted = want.min(available);
            if !paced {
                self.urgent_waits = 0;
            }
            self.tokens -= f64::from(granted);
            // What leaves urgently uses up the paced lanes' share of the moment too.
            self.paced = (self.paced - f64::from(granted)).max(0.0);
            match self.slots.back_mut() {
                Some((slot, n)) if *slot == current => *n += granted,
                _ => self.slots.push_back((current, granted)),
            }
            return Grant {
                granted,
                retry_in_ms: 0,
            };
        }
        // Nothing now: when the bucket holds `target` and the window has room for
        // `at_least`.
        let short = f64::from(target) - bucket;
        let bucket_ms = if short > 0.0 {
            (short * 1000.0 / rate).ceil() as i64
        } else {
            0
        };
        let must_free = at_least.saturating_sub(room);
        let mut freed = 0;
        let mut window_ms = 0;
        if must_free > 0 {
            for (slot, n) in &self.slots {
                freed += n;
                if freed >= must_free {
                    window_ms = leaves(*slot) - now_ms;
                    break;
                }
            }
        }
        let retry_in_ms = bucket_ms.max(window_ms).max(1);
        if !paced {
            self.urgent_waits = now_ms + retry_in_ms + URGENT_HOLD_MS;
        }
        Grant {
            granted: 0,
            retry_in_ms: retry_in_ms as u64,
        }
    }
}

/// How long past the time it was told to come back an urgent grant holds the paced
/// lanes off: the time its asking again takes (a timer, a store transaction).
const URGENT_HOLD_MS: i64 = 50;

/// When the grants of `slot` leave the window: once all of the slot is more than a
/// second and the guard old.
fn leaves(slot: i64) -> i64 {
    (slot + 1) * SLOT_MS + WINDOW_MS + GUARD_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grants asked every `step` ms for `ms`, as much as possible each time: the
    /// operations granted at each time.
    fn run(limit: RateLimit, step: i64, ms: i64, paced: bool) -> Vec<(i64, u32)> {
        let mut window = RateWindow::default();
        let mut grants = Vec::new();
        let mut now = 1_000_000;
        while now < 1_000_000 + ms {
            let g = window.grant(limit, now, u32::MAX, 1, paced);
            if g.granted > 0 {
                grants.push((now, g.granted));
            }
            now += step;
        }
        grants
    }

    fn most_in_any_second(grants: &[(i64, u32)]) -> u32 {
        grants
            .iter()
            .map(|(start, _)| {
                grants
                    .iter()
                    .filter(|(t, _)| *t >= *start && *t < start + 1000)
                    .map(|(_, n)| n)
                    .sum()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn no_second_holds_more_than_the_rate_even_after_a_full_bucket() {
        for (rate, burst, step, paced) in [
            (50, None, 1, false),
            (50, None, 1, true),
            (50, Some(10), 3, false),
            (100, None, 7, true),
            (7, Some(1), 1, false),
        ] {
            let limit = RateLimit::new(rate, burst);
            let grants = run(limit, step, 5_000, paced);
            assert!(
                most_in_any_second(&grants) <= rate,
                "{rate}/{burst:?}: {grants:?}"
            );
            let total: u32 = grants.iter().map(|(_, n)| n).sum();
            // Five seconds at the rate, less what the slots' edges cost.
            assert!(total >= rate * 5 * 95 / 100, "{rate}/{burst:?}: {total}");
        }
    }

    #[test]
    fn paced_grants_leave_a_tenth_of_a_second_at_a_time() {
        let limit = RateLimit::new(100, None);
        let grants = run(limit, 1, 3_000, true);
        assert!(grants.iter().all(|(_, n)| *n <= 20), "{grants:?}");
        // Smooth from the start: the window never fills up to shut out urgent sends
        // for long.
        let first_second: u32 = grants
            .iter()
            .filter(|(t, _)| *t < 1_001_000)
            .map(|(_, n)| n)
            .sum();
        assert!((95..=100).contains(&first_second), "{first_second}");
        let mut window = RateWindow::default();
        for (t, _) in &grants {
            window.grant(limit, *t, 10, 1, true);
        }
        // An urgent send finds room within a tenth of a second whatever the flood.
        let urgent = window.grant(limit, 1_003_000, 1, 1, false);
        assert!(
            urgent.granted == 1 || urgent.retry_in_ms <= 110,
            "{urgent:?}"
        );
    }

    #[test]
    fn a_flood_asking_as_the_coalescer_does_reaches_the_rate() {
        // A tenth's worth at least each time, asked again 2 ms after the time a refusal
        // names (a timer, a task), and 1 ms after a grant.
        for rate in [50, 100, 1000, 5000] {
            let limit = RateLimit::new(rate, None);
            let mut window = RateWindow::default();
            let (mut granted, mut now) = (0u64, 5_000_000);
            while now < 5_000_000 + 20_000 {
                let g = window.grant(limit, now, 10_000, 1, true);
                granted += u64::from(g.granted);
                now += if g.granted > 0 {
                    1
                } else {
                    g.retry_in_ms as i64 + 2
                };
            }
            let per_second = granted as f64 / 20.0;
            assert!(
                per_second >= 0.96 * f64::from(rate) && per_second <= f64::from(rate) * 1.01,
                "{per_second}/s at a rate of {rate}"
            );
        }
    }

    #[test]
    fn an_urgent_grant_waiting_for_room_holds_paced_grants_off_it() {
        let limit = RateLimit::new(10, None);
        let mut window = RateWindow::default();
        assert_eq!(window.grant(limit, 10_000, 10, 1, false).granted, 10);
        let urgent = window.grant(limit, 10_100, 1, 1, false);
        assert_eq!(urgent.granted, 0);
        let room_at = 10_100 + urgent.retry_in_ms as i64;
        // Another replica's paced grant, the moment the room comes: held off.
        let paced = window.grant(limit, room_at, 5, 1, true);
        assert_eq!(paced.granted, 0);
        assert!(paced.retry_in_ms > 0);
        // The urgent one comes back a little late and still finds it.
        assert_eq!(window.grant(limit, room_at + 5, 1, 1, false).granted, 1);
        assert!(window.grant(limit, room_at + 6, 5, 1, true).granted > 0);
    }

    #[test]
    fn the_burst_bounds_what_leaves_at_once() {
        let limit = RateLimit::new(100, Some(10));
        let mut window = RateWindow::default();
        assert_eq!(window.grant(limit, 5_000, 1_000, 1, false).granted, 10);
        let refused = window.grant(limit, 5_000, 1_000, 1, false);
        assert_eq!(refused.granted, 0);
        assert_eq!(refused.retry_in_ms, 10, "one token every 10 ms");
        assert_eq!(window.grant(limit, 5_050, 1_000, 1, false).granted, 5);
    }

    #[test]
    fn a_full_window_says_when_it_has_room() {
        let limit = RateLimit::new(10, None);
        let mut window = RateWindow::default();
        assert_eq!(window.grant(limit, 10_000, 10, 1, false).granted, 10);
        let refused = window.grant(limit, 10_500, 5, 5, false);
        assert_eq!(refused.granted, 0);
        // The slot of 10 000 ms leaves the window when all of it is a second (and the
        // guard) old.
        assert_eq!(refused.retry_in_ms, 10_000 + 10 + 1000 + 20 - 10_500);
        let later = 10_500 + i64::try_from(refused.retry_in_ms).unwrap();
        assert_eq!(window.grant(limit, later, 5, 5, false).granted, 5);
    }

    #[test]
    fn at_least_is_all_or_nothing() {
        let limit = RateLimit::new(10, None);
        let mut window = RateWindow::default();
        assert_eq!(window.grant(limit, 1_000, 8, 1, false).granted, 8);
        assert_eq!(window.grant(limit, 1_001, 5, 3, false).granted, 0);
        assert_eq!(window.grant(limit, 1_001, 5, 2, false).granted, 2);
    }

    #[test]
    fn the_state_reads_back() {
        let limit = RateLimit::new(10, Some(4));
        let mut window = RateWindow::default();
        window.grant(limit, 1_000, 3, 1, true);
        let json = serde_json::to_vec(&window).unwrap();
        let back: RateWindow = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, window);
    }
}
