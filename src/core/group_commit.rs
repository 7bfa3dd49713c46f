//! Group commit: one task takes every request waiting, applies them in one store
//! transaction, and answers each. Under load, requests that arrive while a commit runs
//! share the next one, so the store sees one transaction per group instead of one per
//! request; an idle writer commits a lone request at once. Used by the event log
//! (`events/`), the dispatcher's settlements (`dispatch/`) and the sandbox's saves.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::core::ports::store::StoreError;

type Reply<R> = oneshot::Sender<Result<R, StoreError>>;

/// The handle of a group-commit writer task.
#[derive(Debug)]
pub struct GroupWriter<C, R> {
    queue: mpsc::Sender<(C, Reply<R>)>,
}

impl<C, R> Clone for GroupWriter<C, R> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
        }
    }
}

impl<C: Send + 'static, R: Send + 'static> GroupWriter<C, R> {
    /// Starts the writer: `apply` commits a group (at most `max_group` requests) and
    /// returns one result per request, in order. Groups are applied one at a time.
    pub fn spawn<F, Fut>(max_group: usize, mut apply: F) -> Self
    where
        F: FnMut(Vec<C>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<R>, StoreError>> + Send,
    {
        let (queue, mut requests) = mpsc::channel::<(C, Reply<R>)>(max_group * 4);
        tokio::spawn(async move {
            let mut group = Vec::with_capacity(max_group);
            while requests.recv_many(&mut group, max_group).await > 0 {
                commit(&mut group, &mut apply).await;
            }
        });
        Self { queue }
    }

    /// [`GroupWriter::spawn`] with `writers` groups applied at once: while every writer
    /// commits, requests gather for the next one free.
    pub fn spawn_many<F, Fut>(writers: usize, max_group: usize, apply: F) -> Self
    where
        F: Fn(Vec<C>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<Vec<R>, StoreError>> + Send,
    {
        let (queue, requests) = mpsc::channel::<(C, Reply<R>)>(max_group * 4);
        let requests = std::sync::Arc::new(tokio::sync::Mutex::new(requests));
        for _ in 0..writers.max(1) {
            let (requests, mut apply) = (requests.clone(), apply.clone());
            tokio::spawn(async move {
                let mut group = Vec::with_capacity(max_group);
                loop {
                    let taken = requests.lock().await.recv_many(&mut group, max_group).await;
                    if taken == 0 {
                        return;
                    }
                    commit(&mut group, &mut apply).await;
                }
            });
        }
        Self { queue }
    }

    /// Queues one request and waits for its group to commit.
    pub async fn submit(&self, request: C) -> Result<R, StoreError> {
        let (reply, result) = oneshot::channel();
        let gone = || StoreError::Append("the store writer has stopped".into());
        self.queue
            .send((request, reply))
            .await
            .map_err(|_| gone())?;
        result.await.map_err(|_| gone())?
    }
}

/// Applies one group and answers each request of it.
async fn commit<C, R, F, Fut>(group: &mut Vec<(C, Reply<R>)>, apply: &mut F)
where
    F: FnMut(Vec<C>) -> Fut,
    Fut: Future<Output = Result<Vec<R>, StoreError>>,
{
    let (items, replies): (Vec<C>, Vec<Reply<R>>) = group.drain(..).unzip();
    let count = items.len();
    match apply(items).await {
        Ok(results) if results.len() == count => {
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(Ok(result));
            }
        }
        Ok(results) => {
            let text = format!("{} results for {count} requests", results.len());
            for reply in replies {
                let _ = reply.send(Err(StoreError::Append(text.clone())));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, requests = count, "store group commit failed");
            let text = e.to_string();
            for reply in replies {
                let _ = reply.send(Err(StoreError::Append(text.clone())));
            }
        }
    }
}
