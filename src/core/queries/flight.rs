//! One gateway lookup per key at a time, and its answer kept for a short while: callers
//! asking for the same thing at once share the lookup in flight (single flight), and
//! callers asking again while its answer is fresh get that answer. The lookup runs as a
//! task of its own, so a caller that leaves neither cancels it for the others nor
//! leaves a half-done lookup behind; each caller waits at most until its own deadline.

use std::{collections::HashMap, hash::Hash, sync::Arc, time::Duration};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use crate::core::domain::{AnswerSource, Error};

/// A lookup in flight, as every caller waiting for it holds it.
type Flight<V> = Shared<BoxFuture<'static, Result<V, Error>>>;

/// The lookups of one kind of query, by key.
pub struct Flights<K, V> {
    inner: Arc<std::sync::Mutex<Inner<K, V>>>,
    /// How long an answer is given again without asking the gateway (zero: never).
    fresh_for: Duration,
    /// Keys kept at most (answers and flights); beyond, lookups are not shared or kept.
    capacity: usize,
}

struct Inner<K, V> {
    slots: HashMap<K, Slot<V>>,
    /// Numbers each flight, so a finished one updates only its own slot.
    next_flight: u64,
    /// When stale answers were last dropped (a full map is swept at most this often).
    swept: Instant,
}

/// Where a caller's answer comes from.
enum Found<V> {
    /// A fresh answer.
    Fresh(V),
    /// A lookup in flight: a new one or another caller's.
    Flight(Flight<V>, AnswerSource),
    /// No room to keep another key: the caller's own lookup.
    Full(BoxFuture<'static, Result<V, Error>>),
}

struct Slot<V> {
    /// The lookup in flight and its number.
    running: Option<(u64, Flight<V>)>,
    /// The last answer and when it came.
    answered: Option<(Instant, V)>,
}

impl<K, V> Flights<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Flights whose answers stay fresh for `fresh_for`, for `capacity` keys at most.
    pub fn new(fresh_for: Duration, capacity: usize) -> Self {
        Self {
            inner: Arc::new(std::sync::Mutex::new(Inner {
                slots: HashMap::new(),
                next_flight: 0,
                swept: Instant::now(),
            })),
            fresh_for,
            capacity: capacity.max(1),
        }
    }

    /// The answer for `key`: fresh from an earlier lookup (`Cache`), from a lookup
    /// already in flight (`SharedLookup`), or from a new one that `lookup` starts
    /// (`Lookup`), waited for until `deadline` at most.
    pub async fn get(
        &self,
        key: K,
        deadline: Option<Instant>,
        lookup: impl FnOnce() -> BoxFuture<'static, Result<V, Error>>,
    ) -> Result<(V, AnswerSource), Error> {
        match self.find(key, lookup) {
            Found::Fresh(answer) => Ok((answer, AnswerSource::Cache)),
            Found::Flight(flight, source) => wait(flight, deadline).await.map(|v| (v, source)),
            // Full of fresh answers and flights: this lookup is the caller's own.
            Found::Full(lookup) => wait(lookup, deadline)
                .await
                .map(|v| (v, AnswerSource::Lookup)),
        }
    }

    /// What [`Flights::get`] waits for (without holding the lock while it does).
    fn find(
        &self,
        key: K,
        lookup: impl FnOnce() -> BoxFuture<'static, Result<V, Error>>,
    ) -> Found<V> {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some(slot) = inner.slots.get(&key) {
            if let Some((at, answer)) = &slot.answered
                && now.duration_since(*at) < self.fresh_for
            {
                return Found::Fresh(answer.clone());
            }
            if let Some((_, flight)) = &slot.running {
                return Found::Flight(flight.clone(), AnswerSource::SharedLookup);
            }
        } else if inner.slots.len() >= self.capacity {
            self.sweep(&mut inner, now);
            if inner.slots.len() >= self.capacity {
                return Found::Full(lookup());
            }
        }
        Found::Flight(self.start(&mut inner, key, lookup), AnswerSource::Lookup)
    }

    /// Starts the lookup of `key` as a task that records its answer when it ends.
    fn start(
        &self,
        inner: &mut Inner<K, V>,
        key: K,
        lookup: impl FnOnce() -> BoxFuture<'static, Result<V, Error>>,
    ) -> Flight<V> {
        let number = inner.next_flight;
        inner.next_flight += 1;
        let task = tokio::spawn({
            let (shared, key, keep) = (self.inner.clone(), key.clone(), !self.fresh_for.is_zero());
            let lookup = lookup();
            async move {
                let result = lookup.await;
                let mut inner = shared.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(slot) = inner.slots.get_mut(&key)
                    && slot.running.as_ref().is_some_and(|(n, _)| *n == number)
                {
                    slot.running = None;
                    match &result {
                        Ok(answer) if keep => {
                            slot.answered = Some((Instant::now(), answer.clone()));
                        }
                        // An error is shared with the callers that waited for it, not
                        // given again: the next caller asks.
                        _ => {
                            if slot.answered.is_none() {
                                inner.slots.remove(&key);
                            }
                        }
                    }
                }
                result
            }
        });
        let flight: Flight<V> = async move {
            task.await.unwrap_or_else(|e| {
                Err(Error::Internal(format!(
                    "a shared gateway lookup failed: {e}"
                )))
            })
        }
        .boxed()
        .shared();
        let slot = inner.slots.entry(key).or_insert(Slot {
            running: None,
            answered: None,
        });
        slot.running = Some((number, flight.clone()));
        flight
    }

    /// Drops answers that are no longer fresh, at most once per freshness period (a
    /// full map of fresh answers is not swept on every call).
    fn sweep(&self, inner: &mut Inner<K, V>, now: Instant) {
        if now.duration_since(inner.swept) < self.fresh_for.max(Duration::from_millis(100)) {
            return;
        }
        inner.swept = now;
        let fresh_for = self.fresh_for;
        inner.slots.retain(|_, slot| {
            slot.running.is_some()
                || slot
                    .answered
                    .as_ref()
                    .is_some_and(|(at, _)| now.duration_since(*at) < fresh_for)
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keys held now (answers and flights).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().slots.len()
    }
}

/// `answer`, or `DEADLINE_EXCEEDED` at `deadline` (nothing of a query changes state).
async fn wait<V>(
    answer: impl Future<Output = Result<V, Error>>,
    deadline: Option<Instant>,
) -> Result<V, Error> {
    match deadline {
        None => answer.await,
        Some(deadline) => tokio::time::timeout_at(deadline, answer)
            .await
            .unwrap_or(Err(Error::DeadlineExceeded {
                outcome_unknown: false,
            })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counted(
        lookups: &Arc<AtomicUsize>,
        answer: Result<u32, Error>,
        takes: Duration,
    ) -> impl FnOnce() -> BoxFuture<'static, Result<u32, Error>> {
        let lookups = lookups.clone();
        move || {
            async move {
                lookups.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(takes).await;
                answer
            }
            .boxed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn callers_at_once_share_one_lookup_and_later_ones_get_its_fresh_answer() {
        let flights = Arc::new(Flights::<u64, u32>::new(Duration::from_secs(1), 100));
        let lookups = Arc::new(AtomicUsize::new(0));
        let calls: Vec<_> = (0..50)
            .map(|_| {
                let (flights, lookups) = (flights.clone(), lookups.clone());
                tokio::spawn(async move {
                    flights
                        .get(
                            7,
                            None,
                            counted(&lookups, Ok(70), Duration::from_millis(50)),
                        )
                        .await
                })
            })
            .collect();
        let mut sources = Vec::new();
        for call in calls {
            let (answer, source) = call.await.unwrap().unwrap();
            assert_eq!(answer, 70);
            sources.push(source);
        }
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        assert_eq!(
            sources
                .iter()
                .filter(|s| **s == AnswerSource::Lookup)
                .count(),
            1
        );
        assert!(sources[1..].iter().all(|s| *s != AnswerSource::Cache));
        let again = flights
            .get(7, None, counted(&lookups, Ok(71), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(again, (70, AnswerSource::Cache));
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = flights
            .get(7, None, counted(&lookups, Ok(72), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(later, (72, AnswerSource::Lookup));
        assert_eq!(lookups.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_is_shared_but_not_kept_and_a_caller_waits_only_until_its_deadline() {
        let flights = Flights::<u64, u32>::new(Duration::from_secs(1), 100);
        let lookups = Arc::new(AtomicUsize::new(0));
        let failed = flights
            .get(
                1,
                None,
                counted(&lookups, Err(Error::Internal("x".into())), Duration::ZERO),
            )
            .await;
        assert!(failed.is_err());
        assert_eq!(flights.len(), 0);
        let soon = Instant::now() + Duration::from_millis(10);
        let late = flights
            .get(
                1,
                Some(soon),
                counted(&lookups, Ok(5), Duration::from_secs(5)),
            )
            .await;
        assert!(
            matches!(late, Err(Error::DeadlineExceeded { .. })),
            "{late:?}"
        );
        // The lookup ran on for whoever asks next.
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
        let next = flights
            .get(1, None, counted(&lookups, Ok(6), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(next.0, 5);
        assert_eq!(lookups.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_map_keeps_no_more_keys_and_sweeps_stale_ones() {
        let flights = Flights::<u64, u32>::new(Duration::from_secs(1), 2);
        let lookups = Arc::new(AtomicUsize::new(0));
        for key in 0..3 {
            let (_, source) = flights
                .get(key, None, counted(&lookups, Ok(1), Duration::ZERO))
                .await
                .unwrap();
            assert_eq!(source, AnswerSource::Lookup);
        }
        assert_eq!(flights.len(), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        flights
            .get(9, None, counted(&lookups, Ok(1), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(flights.len(), 1);
    }
}
