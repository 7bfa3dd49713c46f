//! One gateway lookup per key at a time, and its answer kept for a short while: callers
//! asking for the same thing at once share the lookup in flight (single flight), and
//! callers asking again while its answer is fresh get that answer. The lookup runs as a
//! task of its own, so a caller that leaves neither cancels it for the others nor
//! leaves a half-done lookup behind; each caller waits at most until its own deadline.

use std::{collections::HashMap, hash::Hash, sync::Arc, time::Duration};

use futures_util::future::{BoxFuture, FutureExt, Shared, join_all};
use tokio::time::Instant;

use crate::core::domain::{AnswerSource, Error};

/// A lookup in flight, as every caller waiting for it holds it.
type Flight<V> = Shared<BoxFuture<'static, Result<V, Error>>>;

/// What a lookup of several keys answers: an answer per key, in the keys' order (an
/// error there is that key's alone), or an error of the whole lookup.
pub type Answers<V> = Result<Vec<Result<V, Error>>, Error>;

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
    /// Numbers each lookup, so a finished one updates only its own slots.
    next_flight: u64,
    /// When stale answers were last dropped (a full map is swept at most this often).
    swept: Instant,
}

/// Where a caller's answer for one key comes from.
enum Found<V> {
    /// A fresh answer.
    Fresh(V),
    /// A lookup in flight: a new one or another caller's.
    Flight(Flight<V>, AnswerSource),
}

struct Slot<V> {
    /// The lookup in flight and its number.
    running: Option<(u64, Flight<V>)>,
    /// The last answer and when it came.
    answered: Option<(Instant, V)>,
}

impl<K, V> Flights<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
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
        let mut answers = self
            .get_many(vec![key], deadline, move |_| {
                lookup().map(|answer| Ok(vec![answer])).boxed()
            })
            .await;
        answers
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no answer for a lookup".into())))
    }

    /// The answers for `keys` (distinct), in their order, as [`Flights::get`] gives
    /// them, except that the keys neither fresh nor in flight are looked up together:
    /// `lookup` gets them all, in one request, and its answers are shared with every
    /// caller asking for any of them meanwhile.
    pub async fn get_many(
        &self,
        keys: Vec<K>,
        deadline: Option<Instant>,
        lookup: impl FnOnce(Vec<K>) -> BoxFuture<'static, Answers<V>>,
    ) -> Vec<Result<(V, AnswerSource), Error>> {
        let found = self.find(keys, lookup);
        join_all(found.into_iter().map(|found| async move {
            match found {
                Found::Fresh(answer) => Ok((answer, AnswerSource::Cache)),
                Found::Flight(flight, source) => wait(flight, deadline).await.map(|v| (v, source)),
            }
        }))
        .await
    }

    /// What [`Flights::get_many`] waits for, a key each (without holding the lock
    /// while it waits).
    fn find(
        &self,
        keys: Vec<K>,
        lookup: impl FnOnce(Vec<K>) -> BoxFuture<'static, Answers<V>>,
    ) -> Vec<Found<V>> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.slots.len() + keys.len() > self.capacity {
            self.sweep(&mut inner, now);
        }
        let number = inner.next_flight;
        inner.next_flight += 1;
        // Each key's answer, or the place of its key among those to look up.
        let mut found: Vec<Result<Found<V>, (usize, AnswerSource)>> =
            Vec::with_capacity(keys.len());
        // The keys to look up, and whether each has a slot (no room: the caller's own).
        let mut missing: Vec<(K, bool)> = Vec::new();
        for key in keys {
            if let Some(i) = missing.iter().position(|(k, _)| *k == key) {
                // Asked twice in one call: one lookup.
                found.push(Err((i, AnswerSource::SharedLookup)));
                continue;
            }
            let held = match inner.slots.get(&key) {
                Some(slot) => {
                    if let Some((at, answer)) = &slot.answered
                        && now.duration_since(*at) < self.fresh_for
                    {
                        found.push(Ok(Found::Fresh(answer.clone())));
                        continue;
                    }
                    if let Some((_, flight)) = &slot.running {
                        found.push(Ok(Found::Flight(
                            flight.clone(),
                            AnswerSource::SharedLookup,
                        )));
                        continue;
                    }
                    true
                }
                None => inner.slots.len() < self.capacity,
            };
            if held {
                inner.slots.entry(key.clone()).or_insert(Slot {
                    running: None,
                    answered: None,
                });
            }
            found.push(Err((missing.len(), AnswerSource::Lookup)));
            missing.push((key, held));
        }
        let flights = if missing.is_empty() {
            Vec::new()
        } else {
            self.start(&mut inner, number, missing, lookup)
        };
        found
            .into_iter()
            .map(|f| {
                f.unwrap_or_else(|(i, source)| {
                    let flight = flights.get(i).cloned().unwrap_or_else(|| {
                        futures_util::future::ready(Err(Error::Internal(
                            "a lookup left a key out".into(),
                        )))
                        .boxed()
                        .shared()
                    });
                    Found::Flight(flight, source)
                })
            })
            .collect()
    }

    /// Starts the lookup (numbered `number`) of the `missing` keys as one task that
    /// records their answers when it ends; a flight for each key, in their order.
    fn start(
        &self,
        inner: &mut Inner<K, V>,
        number: u64,
        missing: Vec<(K, bool)>,
        lookup: impl FnOnce(Vec<K>) -> BoxFuture<'static, Answers<V>>,
    ) -> Vec<Flight<V>> {
        let keys: Vec<K> = missing.iter().map(|(k, _)| k.clone()).collect();
        let task = tokio::spawn({
            let (shared, keep) = (self.inner.clone(), !self.fresh_for.is_zero());
            let held: Vec<(K, bool)> = missing.clone();
            let lookup = lookup(keys);
            async move {
                let answers = lookup.await;
                let mut inner = shared.lock().unwrap_or_else(|e| e.into_inner());
                for (i, (key, _)) in held.iter().enumerate().filter(|(_, (_, h))| *h) {
                    let answer = match &answers {
                        Ok(each) => each.get(i).and_then(|a| a.as_ref().ok()),
                        Err(_) => None,
                    };
                    record(&mut inner, key, number, answer.filter(|_| keep));
                }
                answers
            }
        });
        let all: Shared<BoxFuture<'static, Answers<V>>> = async move {
            task.await.unwrap_or_else(|e| {
                Err(Error::Internal(format!(
                    "a shared gateway lookup failed: {e}"
                )))
            })
        }
        .boxed()
        .shared();
        missing
            .into_iter()
            .enumerate()
            .map(|(i, (key, held))| {
                let flight: Flight<V> = all
                    .clone()
                    .map(move |answers| {
                        answers?.get(i).cloned().unwrap_or_else(|| {
                            Err(Error::Internal("a lookup left a key unanswered".into()))
                        })
                    })
                    .boxed()
                    .shared();
                if held && let Some(slot) = inner.slots.get_mut(&key) {
                    slot.running = Some((number, flight.clone()));
                }
                flight
            })
            .collect()
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

/// Records the end of lookup `number` in the slot of `key`, if that lookup is still
/// the slot's: its `answer` is kept; with none (an error, or nothing kept), the slot
/// goes unless it holds an earlier answer. An error is shared with the callers that
/// waited for it, never given again: the next caller asks.
fn record<K: Hash + Eq, V: Clone>(
    inner: &mut Inner<K, V>,
    key: &K,
    number: u64,
    answer: Option<&V>,
) {
    let Some(slot) = inner.slots.get_mut(key) else {
        return;
    };
    if slot.running.as_ref().is_none_or(|(n, _)| *n != number) {
        return;
    }
    slot.running = None;
    match answer {
        Some(answer) => slot.answered = Some((Instant::now(), answer.clone())),
        None => {
            if slot.answered.is_none() {
                inner.slots.remove(key);
            }
        }
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
    async fn keys_asked_together_are_one_lookup_and_each_answer_is_its_keys_own() {
        let flights = Arc::new(Flights::<u64, u32>::new(Duration::from_secs(1), 100));
        let lookups = Arc::new(AtomicUsize::new(0));
        // Key 1 is in flight for another caller.
        let other = tokio::spawn({
            let (flights, lookups) = (flights.clone(), lookups.clone());
            async move {
                flights
                    .get(
                        1,
                        None,
                        counted(&lookups, Ok(10), Duration::from_millis(50)),
                    )
                    .await
            }
        });
        tokio::task::yield_now().await;
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let answers = flights
            .get_many(vec![1, 2, 3, 2], None, {
                let (lookups, asked) = (lookups.clone(), asked.clone());
                move |keys| {
                    async move {
                        lookups.fetch_add(1, Ordering::SeqCst);
                        *asked.lock().unwrap() = keys;
                        Ok(vec![Ok(20), Err(Error::Internal("3".into()))])
                    }
                    .boxed()
                }
            })
            .await;
        assert_eq!(*asked.lock().unwrap(), [2, 3]);
        assert_eq!(
            answers[0].as_ref().unwrap(),
            &(10, AnswerSource::SharedLookup)
        );
        assert_eq!(answers[1].as_ref().unwrap(), &(20, AnswerSource::Lookup));
        assert!(answers[2].is_err());
        assert_eq!(
            answers[3].as_ref().unwrap(),
            &(20, AnswerSource::SharedLookup)
        );
        assert_eq!(other.await.unwrap().unwrap(), (10, AnswerSource::Lookup));
        assert_eq!(lookups.load(Ordering::SeqCst), 2);
        // Answers are kept, the error is not.
        let again = flights
            .get_many(vec![2, 3], None, |_| async { Ok(vec![Ok(31)]) }.boxed())
            .await;
        assert_eq!(again[0].as_ref().unwrap(), &(20, AnswerSource::Cache));
        assert_eq!(again[1].as_ref().unwrap(), &(31, AnswerSource::Lookup));
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
