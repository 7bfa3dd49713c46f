//! The contracted rate (`MSGW_SANDBOX_RATE`): operations accepted in any one second.
//!
//! The window is exact rather than a token bucket: it keeps what it accepted in the
//! last second, so a user sees precisely the rate they set, bursts included.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The span the rate is counted over.
const WINDOW: Duration = Duration::from_secs(1);

/// Operations accepted in the last second.
#[derive(Debug)]
pub(super) struct Window {
    /// Operations a second.
    rate: u32,
    /// When each accepted envelope came and its operations, oldest first.
    accepted: VecDeque<(Instant, u32)>,
    /// The sum of `accepted`'s operations.
    total: u32,
}

impl Window {
    /// An empty window of `rate` operations a second.
    pub(super) fn new(rate: u32) -> Self {
        Self {
            rate,
            accepted: VecDeque::new(),
            total: 0,
        }
    }

    /// Counts an envelope of `ops` operations arriving at `now` if they fit; else
    /// counts nothing and says in how many whole seconds (at least 1) they would fit.
    /// An envelope larger than the rate never fits: 1, as a gateway has no better
    /// answer for it.
    pub(super) fn admit(&mut self, now: Instant, ops: usize) -> Result<(), u64> {
        while let Some(&(at, n)) = self.accepted.front() {
            if now.saturating_duration_since(at) < WINDOW {
                break;
            }
            self.accepted.pop_front();
            self.total -= n;
        }
        let Some(ops) = u32::try_from(ops).ok().filter(|&ops| ops <= self.rate) else {
            return Err(1);
        };
        if self.total + ops <= self.rate {
            self.accepted.push_back((now, ops));
            self.total += ops;
            return Ok(());
        }
        // The oldest entries leave first: room comes when enough of them have.
        let mut left = self.total;
        let mut room_at = now;
        for &(at, n) in &self.accepted {
            left -= n;
            room_at = at + WINDOW;
            if left + ops <= self.rate {
                break;
            }
        }
        // Whole seconds, rounded up: a retry after them finds the room.
        let wait = room_at.saturating_duration_since(now);
        Err((wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_over_the_rate_in_one_second_are_refused_whole_and_not_counted() {
        let start = Instant::now();
        let mut window = Window::new(5);
        assert_eq!(window.admit(start, 3), Ok(()));
        assert_eq!(window.admit(start + Duration::from_millis(100), 3), Err(1));
        // The refused three did not count: two still fit.
        assert_eq!(window.admit(start + Duration::from_millis(200), 2), Ok(()));
        assert_eq!(window.admit(start + Duration::from_millis(300), 1), Err(1));
        // The first three left the window; the two of 200 ms are still in it.
        assert_eq!(window.admit(start + Duration::from_millis(1000), 3), Ok(()));
        assert_eq!(window.admit(start + Duration::from_millis(1100), 1), Err(1));
        assert_eq!(window.admit(start + Duration::from_millis(1200), 1), Ok(()));
    }

    #[test]
    fn an_envelope_larger_than_the_rate_never_fits() {
        let start = Instant::now();
        let mut window = Window::new(2);
        assert_eq!(window.admit(start, 3), Err(1));
        assert_eq!(window.admit(start + Duration::from_secs(5), 3), Err(1));
        assert_eq!(window.admit(start + Duration::from_secs(5), 2), Ok(()));
    }
}
